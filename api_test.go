package distsync_test

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/election"
	"github.com/distsync/distsync/fair"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
	"github.com/distsync/distsync/once"
	"github.com/distsync/distsync/reentrant"
	"github.com/distsync/distsync/rwmutex"
	"github.com/distsync/distsync/semaphore"
	"github.com/distsync/distsync/waitgroup"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var (
	ctxType    = reflect.TypeFor[context.Context]()
	errType    = reflect.TypeFor[error]()
	boolType   = reflect.TypeFor[bool]()
	int64Type  = reflect.TypeFor[int64]()
	leaseType  = reflect.TypeFor[*distsync.Lease]()
	lockerType = reflect.TypeFor[sync.Locker]()
	optsType   = reflect.TypeFor[[]distsync.Option]()
)

func sig(in []reflect.Type, out ...reflect.Type) string {
	return reflect.FuncOf(in, out, false).String()
}

// The agreed shape of the family: every acquire has a lease-returning form, every exclusive
// lock a sync.Locker, every lock and semaphore says who holds it (Holders), every constructor takes the shared distsync.Option. A primitive that
// lacks one, or a method with another signature, fails here.
func TestEveryPrimitiveHasTheAgreedShape(t *testing.T) {
	t.Parallel()
	holdersSig := sig([]reflect.Type{ctxType}, reflect.TypeFor[[]distsync.Holder](), errType)
	lockShape := map[string]string{
		"Lock":         sig([]reflect.Type{ctxType}, errType),
		"LockLease":    sig([]reflect.Type{ctxType}, leaseType, errType),
		"TryLock":      sig([]reflect.Type{ctxType}, boolType, errType),
		"TryLockLease": sig([]reflect.Type{ctxType}, leaseType, boolType, errType),
		"Unlock":       sig([]reflect.Type{ctxType}, errType),
		"Name":         sig(nil, reflect.TypeFor[string]()),
		"Holders":      holdersSig,
	}
	with := func(base map[string]string, more map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range more {
			m[k] = v
		}
		return m
	}
	locker := map[string]string{"Locker": sig(nil, lockerType)}
	shapes := []struct {
		name    string
		typ     reflect.Type
		methods map[string]string
	}{
		{"mutex.Mutex", reflect.TypeFor[*mutex.Mutex](), with(lockShape, locker)},
		{"fair.Mutex", reflect.TypeFor[*fair.Mutex](), with(lockShape, locker)},
		{"reentrant.Mutex", reflect.TypeFor[*reentrant.Mutex](), with(lockShape, map[string]string{
			"Locker": sig([]reflect.Type{reflect.TypeFor[reentrant.Owner]()}, lockerType)})},
		{"rwmutex.RWMutex", reflect.TypeFor[*rwmutex.RWMutex](), with(with(lockShape, locker), map[string]string{
			"RLock":         sig([]reflect.Type{ctxType}, errType),
			"RLockLease":    sig([]reflect.Type{ctxType}, leaseType, errType),
			"TryRLock":      sig([]reflect.Type{ctxType}, boolType, errType),
			"TryRLockLease": sig([]reflect.Type{ctxType}, leaseType, boolType, errType),
			"RUnlock":       sig([]reflect.Type{ctxType}, errType),
			"RLocker":       sig(nil, lockerType),
		})},
		{"semaphore.Semaphore", reflect.TypeFor[*semaphore.Semaphore](), map[string]string{
			"Acquire":         sig([]reflect.Type{ctxType, int64Type}, errType),
			"AcquireLease":    sig([]reflect.Type{ctxType, int64Type}, leaseType, errType),
			"TryAcquire":      sig([]reflect.Type{ctxType, int64Type}, boolType, errType),
			"TryAcquireLease": sig([]reflect.Type{ctxType, int64Type}, leaseType, boolType, errType),
			"Release":         sig([]reflect.Type{ctxType, int64Type}, errType),
			"Name":            sig(nil, reflect.TypeFor[string]()),
			"Holders":         holdersSig,
		}},
	}
	for _, s := range shapes {
		for name, want := range s.methods {
			m, ok := s.typ.MethodByName(name)
			if !ok {
				t.Errorf("%s has no method %s %s", s.name, name, want)
				continue
			}
			// Drop the receiver.
			in := make([]reflect.Type, m.Type.NumIn()-1)
			for i := range in {
				in[i] = m.Type.In(i + 1)
			}
			out := make([]reflect.Type, m.Type.NumOut())
			for i := range out {
				out[i] = m.Type.Out(i)
			}
			if got := sig(in, out...); got != want {
				t.Errorf("%s.%s is %s, want %s", s.name, name, got, want)
			}
		}
		// Holds are reached through the lease-returning forms only: no accessor of "the"
		// current hold, whose answer depends on which goroutine asks.
		for _, gone := range []string{"Lease", "RLease"} {
			if _, ok := s.typ.MethodByName(gone); ok {
				t.Errorf("%s still has the accessor %s", s.name, gone)
			}
		}
	}

	// Every constructor takes ...distsync.Option last.
	for name, fn := range map[string]any{
		"distsync.New": distsync.New, "mutex.New": mutex.New, "fair.New": fair.New,
		"reentrant.New": reentrant.New, "rwmutex.New": rwmutex.New, "semaphore.New": semaphore.New,
		"once.NewOnce": once.NewOnce, "once.NewGroup": once.NewGroup[string], "once.OnceValue": once.OnceValue[string],
	} {
		ft := reflect.TypeOf(fn)
		if !ft.IsVariadic() || ft.In(ft.NumIn()-1) != optsType {
			t.Errorf("%s is %v: want ...distsync.Option last", name, ft)
		}
	}
}

// No public package declares its own Option type or a per-package copy of a shared option,
// and no exported declaration shows a type from internal/ (go doc would print it).
func TestNoPackageCopiesTheSharedOptions(t *testing.T) {
	t.Parallel()
	shared := map[string]bool{"WithTTL": true, "WithLeaseTTL": true, "WithFixedLease": true,
		"WithWaiterLease": true, "WithHandoffWindow": true}
	dirs := []string{".", "mutex", "fair", "reentrant", "rwmutex", "semaphore", "once", "fenced", "election", "waitgroup"}
	for _, dir := range dirs {
		fset := token.NewFileSet()
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			file, err := parser.ParseFile(fset, f, src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			internal := map[string]bool{} // import names of internal packages
			for _, imp := range file.Imports {
				path := strings.Trim(imp.Path.Value, `"`)
				if strings.Contains(path, "/internal/") {
					name := path[strings.LastIndex(path, "/")+1:]
					if imp.Name != nil {
						name = imp.Name.Name
					}
					internal[name] = true
				}
			}
			showsInternal := func(n ast.Node) string {
				var found string
				ast.Inspect(n, func(n ast.Node) bool {
					if sel, ok := n.(*ast.SelectorExpr); ok {
						if id, ok := sel.X.(*ast.Ident); ok && internal[id.Name] {
							found = id.Name + "." + sel.Sel.Name
						}
					}
					return found == ""
				})
				return found
			}
			for _, d := range file.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
						continue
					}
					if dir != "." && d.Recv == nil && shared[d.Name.Name] {
						t.Errorf("%s: %s copies a shared option of package distsync", f, d.Name.Name)
					}
					if x := showsInternal(d.Type); x != "" {
						t.Errorf("%s: the signature of %s shows %s", f, d.Name.Name, x)
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						ts, ok := s.(*ast.TypeSpec)
						if !ok || !ts.Name.IsExported() {
							continue
						}
						if dir != "." && ts.Name.Name == "Option" {
							t.Errorf("%s declares its own Option type", f)
						}
						if st, ok := ts.Type.(*ast.StructType); ok {
							for _, fld := range st.Fields.List {
								for _, n := range fld.Names {
									if n.IsExported() {
										if x := showsInternal(fld.Type); x != "" {
											t.Errorf("%s: field %s.%s shows %s", f, ts.Name.Name, n.Name, x)
										}
									}
								}
							}
							continue
						}
						if x := showsInternal(ts.Type); x != "" {
							t.Errorf("%s: type %s shows %s", f, ts.Name.Name, x)
						}
					}
				}
			}
		}
	}
}

func exportedRecv(recv *ast.FieldList) bool {
	if len(recv.List) == 0 {
		return false
	}
	typ := recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if ix, ok := typ.(*ast.IndexExpr); ok {
		typ = ix.X
	}
	id, ok := typ.(*ast.Ident)
	return ok && id.IsExported()
}

// An option given where it does not apply is an error that names it, never ignored.
func TestOptionsThatDoNotApplyAreErrors(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		h := b.Pod(t, b.Prefix(t)).H
		cases := []struct {
			what string
			err  error
		}{
			{"mutex.New WithWaiterLease", second(mutex.New(h, "x", distsync.WithWaiterLease(time.Second)))},
			{"mutex.New WithKeyPrefix", second(mutex.New(h, "x", distsync.WithKeyPrefix("p:")))},
			{"fair.New WithHandoffWindow", second(fair.New(h, "x", distsync.WithHandoffWindow(time.Second)))},
			{"semaphore.New WithLogger", second(semaphore.New(h, "x", 2, distsync.WithLogger(nil)))},
			{"reentrant.New WithWaiterLease", second(reentrant.New(h, "x", distsync.WithWaiterLease(time.Second)))},
			{"rwmutex.New WithFenceRetention", second(rwmutex.New(h, "x", distsync.WithFenceRetention(time.Hour)))},
			{"once.NewOnce WithKeep", second(once.NewOnce(h, "x", once.WithKeep(time.Second)))},
			{"once.NewGroup WithWaiterLease", second(once.NewGroup[string](h, "x", distsync.WithWaiterLease(time.Second)))},
			{"distsync.New WithKeep", second(distsync.New(b.Client(t), once.WithKeep(time.Second)))},
			{"mutex.New zero Option", second(mutex.New(h, "x", distsync.Option{}))},
			{"mutex.New WithLeaseTTL(1ms)", second(mutex.New(h, "x", distsync.WithLeaseTTL(time.Millisecond)))},
			{"fair.New WithWaiterLease(0)", second(fair.New(h, "x", distsync.WithWaiterLease(0)))},
		}
		for _, c := range cases {
			if !errors.Is(c.err, distsync.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", c.what, c.err)
			}
		}
		// Those that apply are taken, the primitive's over the Handle's.
		for what, err := range map[string]error{
			"mutex WithFixedLease":        second(mutex.New(h, "x", distsync.WithFixedLease(time.Second), distsync.WithHandoffWindow(time.Second))),
			"fair WithWaiterLease":        second(fair.New(h, "x", distsync.WithWaiterLease(time.Second), distsync.WithLeaseTTL(time.Second))),
			"semaphore WithWaiterLease":   second(semaphore.New(h, "x", 2, distsync.WithWaiterLease(time.Second))),
			"once.Group WithFixedLease":   second(once.NewGroup[string](h, "x", distsync.WithFixedLease(time.Second), once.WithKeep(time.Second))),
			"once.Once WithLeaseTTL":      second(once.NewOnce(h, "x", distsync.WithLeaseTTL(time.Second))),
			"reentrant WithFixedLease":    second(reentrant.New(h, "x", distsync.WithFixedLease(time.Second))),
			"reentrant WithHandoffWindow": second(reentrant.New(h, "x", distsync.WithHandoffWindow(time.Second))),
			"rwmutex WithHandoffWindow":   second(rwmutex.New(h, "x", distsync.WithHandoffWindow(time.Second))),
			"distsync.New WithFixedLease": second(distsync.New(b.Client(t), distsync.WithFixedLease(time.Second))),
		} {
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
		}
	})
}

func second[T any](_ T, err error) error { return err }

// Errors say kind, name and what happened once: no "distsync: distsync:", no kind twice.
func TestErrorsDoNotStutter(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		prefix := b.Prefix(t)
		h := b.Pod(t, prefix).H
		ctx := context.Background()
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		var errs []error
		add := func(err error) { errs = append(errs, err) }
		add(second(distsync.New(nil)))
		add(second(distsync.New(b.Client(t), distsync.WithKeyPrefix("{"))))
		add(second(mutex.New(h, "")))
		add(second(election.New(h, "")))
		el, _ := election.New(h, "e")
		add(second(el.Campaign(cancelled, "v")))
		add(second(el.Leader(ctx)))
		add(second(waitgroup.New(h, "")))
		wg, _ := waitgroup.New(h, "w")
		add(wg.Add(ctx, -1))
		add(wg.Wait(cancelled))
		m, _ := mutex.New(h, "m")
		add(m.Unlock(ctx))
		add(m.Lock(cancelled))
		s, _ := semaphore.New(h, "s", 2)
		add(s.Acquire(ctx, 5))
		add(s.Release(ctx, 1))
		s3, _ := semaphore.New(h, "s", 3)
		_ = s.Acquire(ctx, 1)
		add(s3.Acquire(ctx, 1)) // ErrSizeMismatch
		_ = s.Release(ctx, 1)
		g, _ := once.NewGroup[string](h, "g")
		_, err, _ := g.Do(cancelled, "k", func(context.Context) (string, error) { return "", nil })
		add(err)
		add(second(once.NewOnce(h, "o", once.WithKeep(time.Second))))
		for _, err := range errs {
			if err == nil {
				t.Error("a misuse returned nil")
				continue
			}
			msg := err.Error()
			if strings.Count(msg, "distsync:") > 1 {
				t.Errorf("stutter: %q", msg)
			}
			// A package name as a later segment ("semaphore \"s\": acquire: semaphore: ...").
			for _, seg := range strings.Split(msg, ": ")[1:] {
				switch seg {
				case "distsync", "mutex", "semaphore", "once", "fair", "rwmutex", "reentrant", "election", "waitgroup":
					t.Errorf("stutter: %q", msg)
				}
			}
		}
		if !errors.Is(errs[len(errs)-3], semaphore.ErrSizeMismatch) {
			t.Errorf("size mismatch: %v", errs[len(errs)-3])
		}
	})
}
