package scripts_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/distsync/distsync/internal/scripts"
)

// luaFiles are the package's .lua files (go test runs in the package's directory).
var luaFiles = os.DirFS(".")

// The tests of the seam (seam.go): every script has one struct, and its Call sends the struct's
// fields in their order. That the order is the header's is seamgen's check, when it generates
// seam_gen.go (and seamgen's test, that the file is fresh).

// seam is one struct and the scripts it is the KEYS and ARGV of.
type seam struct {
	args    any
	scripts []*scripts.Script
}

// seams is every struct of the seam.
var seams = []seam{
	{scripts.ExtendArgs{}, []*scripts.Script{scripts.Extend}},
	{scripts.MutexAcquireArgs{}, []*scripts.Script{scripts.MutexAcquire}},
	{scripts.MutexAcquireAllArgs{}, []*scripts.Script{scripts.MutexAcquireAll}},
	{scripts.MutexReleaseArgs{}, []*scripts.Script{scripts.MutexRelease}},
	{scripts.MutexLeaveArgs{}, []*scripts.Script{scripts.MutexLeave}},
	{scripts.MutexConfirmArgs{}, []*scripts.Script{scripts.MutexConfirm}},
	{scripts.MutexRenewArgs{}, []*scripts.Script{scripts.MutexRenew}},
	{scripts.ReentrantLockArgs{}, []*scripts.Script{scripts.ReentrantLock}},
	{scripts.ReentrantUnlockArgs{}, []*scripts.Script{scripts.ReentrantUnlock}},
	{scripts.ReentrantAbandonArgs{}, []*scripts.Script{scripts.ReentrantAbandon}},
	{scripts.ReentrantRenewArgs{}, []*scripts.Script{scripts.ReentrantRenew}},
	{scripts.FairAcquireArgs{}, []*scripts.Script{scripts.FairAcquire}},
	{scripts.FairLeaveArgs{}, []*scripts.Script{scripts.FairLeave}},
	{scripts.FairPlaceArgs{}, []*scripts.Script{scripts.FairPlace}},
	{scripts.SemaphoreArgs{}, scripts.SemaphoreScripts},
	{scripts.HoldersArgs{}, []*scripts.Script{scripts.Holders}},
	{scripts.OnceBeginArgs{}, []*scripts.Script{scripts.OnceBegin}},
	{scripts.OnceFinishArgs{}, []*scripts.Script{scripts.OnceFinish}},
	{scripts.OnceForgetArgs{}, []*scripts.Script{scripts.OnceForget}},
	{scripts.RWMutexArgs{}, scripts.RWMutexScripts},
	{scripts.FenceRaiseArgs{}, []*scripts.Script{scripts.FenceRaise}},
	{scripts.FencedSetArgs{}, []*scripts.Script{scripts.FencedSet}},
	{scripts.FencedDeleteArgs{}, []*scripts.Script{scripts.FencedDelete}},
	{scripts.ElectionLeaderArgs{}, []*scripts.Script{scripts.ElectionLeader}},
	{scripts.ElectionProclaimArgs{}, []*scripts.Script{scripts.ElectionProclaim}},
	{scripts.ElectionRenewArgs{}, []*scripts.Script{scripts.ElectionRenew}},
	{scripts.InspectArgs{}, []*scripts.Script{scripts.Inspect}},
	{scripts.WaitGroupArgs{}, scripts.WaitGroupScripts},
	{scripts.RateArgs{}, scripts.RateScripts},
}

// TestEveryScriptHasASeam checks that every .lua file is loaded, and every script loaded has
// exactly one struct.
func TestEveryScriptHasASeam(t *testing.T) {
	t.Parallel()
	lua, err := fs.Glob(luaFiles, "*.lua")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range scripts.All() {
		names = append(names, s.Name())
	}
	for _, f := range lua {
		if !slices.Contains(names, f) {
			t.Errorf("%s is not loaded", f)
		}
	}
	for _, s := range scripts.All() {
		n := 0
		for _, sm := range seams {
			if slices.Contains(sm.scripts, s) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s has %d structs, want 1", s.Name(), n)
		}
	}
}

// fillMarked sets every field of the struct v to a value of its own, and returns the KEYS and
// ARGV that a call of it must send, in the order of the fields: all of them, or, without opt,
// none of the optional ones (which it leaves empty).
func fillMarked(v reflect.Value, opt bool, want *[2][]string) {
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		key, isKey := sf.Tag.Lookup("key")
		arg, isArg := sf.Tag.Lookup("arg")
		if !isKey && !isArg {
			fillMarked(f, opt, want)
			continue
		}
		vi, tag := 0, key
		if isArg {
			vi, tag = 1, arg
		}
		if strings.HasSuffix(tag, ",opt") && !opt {
			continue
		}
		mark := fmt.Sprintf("%s.%s", v.Type().Name(), sf.Name)
		if f.Kind() == reflect.Slice {
			marks := []string{mark + "[0]", mark + "[1]"}
			f.Set(reflect.ValueOf(marks))
			want[vi] = append(want[vi], marks...)
			continue
		}
		f.SetString(mark)
		want[vi] = append(want[vi], mark)
	}
}

// call returns the Call of the struct v for script s.
func call(v reflect.Value, s *scripts.Script) scripts.Call {
	m := v.MethodByName("Call")
	var in []reflect.Value
	if m.Type().NumIn() == 1 {
		in = []reflect.Value{reflect.ValueOf(s)}
	}
	return m.Call(in)[0].Interface().(scripts.Call)
}

// TestSeamSendsInOrder checks that every struct's Call sends its fields in their order: with
// every field set, and with its optional ones left empty. A Call of every field of a struct
// without a variadic tail is one allocation of the exact size, and fits Exec's buffer.
func TestSeamSendsInOrder(t *testing.T) {
	t.Parallel()
	for _, sm := range seams {
		for _, opt := range []bool{true, false} {
			v := reflect.New(reflect.TypeOf(sm.args)).Elem()
			var want [2][]string
			fillMarked(v, opt, &want)
			for _, s := range sm.scripts {
				got := call(v, s)
				if got.Script != s {
					t.Errorf("%s.Call is for %v, want %s", v.Type().Name(), got.Script, s.Name())
				}
				if !slices.Equal(got.Keys, want[0]) || !slices.Equal(got.Args, want[1]) {
					t.Errorf("%s.Call for %s, opt %v: KEYS %q ARGV %q, want %q %q",
						v.Type().Name(), s.Name(), opt, got.Keys, got.Args, want[0], want[1])
				}
				if opt && !variadic(v.Type()) {
					if cap(got.Args) != len(got.Args) {
						t.Errorf("%s.Call: room for %d ARGV, not %d", v.Type().Name(), cap(got.Args), len(got.Args))
					}
					if n := len(got.Keys) + len(got.Args); n > scripts.MaxArgs {
						t.Errorf("%s: %d strings, more than scripts.MaxArgs", v.Type().Name(), n)
					}
				}
			}
		}
	}
}

// variadic reports whether the struct type t has a []string field, itself or in a struct
// field.
func variadic(t reflect.Type) bool {
	for i := range t.NumField() {
		switch f := t.Field(i).Type; f.Kind() {
		case reflect.Slice:
			return true
		case reflect.Struct:
			if variadic(f) {
				return true
			}
		}
	}
	return false
}

// TestSharedSeamRefusesOtherScripts checks that a struct shared by a family of scripts
// panics when it is used for another script.
func TestSharedSeamRefusesOtherScripts(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("RWMutexArgs.Call(MutexAcquire) did not panic")
		}
	}()
	scripts.RWMutexArgs{}.Call(scripts.MutexAcquire)
}

// positional is a script run, or a call made, with positional KEYS and ARGV: a script's Exec
// (scripts.MutexAcquire.Exec, call.Script.Exec) or a Call literal (not a []scripts.Call).
var positional = regexp.MustCompile(`scripts\.[A-Z]\w*\.Exec\(|\.Script\.Exec\(|(^|[^\]])scripts\.Call\{`)

// TestCallSitesNameTheirArguments checks that the module's code (not its tests, nor the
// modules under it) runs every script through its struct, never with positional slices.
func TestCallSitesNameTheirArguments(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]bool{
		`vals, err := scripts.MutexAcquire.Exec(ctx, c, m.keys, []string{owner})`: true,
		`n, err := call.Script.Exec(ctx, c, call.Keys, call.Args).AsInt64()`:      true,
		`confirm := &scripts.Call{Script: scripts.MutexConfirm, Keys: m.keys}`:    true,
		`res := scripts.DoMulti(ctx, c, []scripts.Call{*first, rel.Call()})`:      false,
		`vals, err := scripts.MutexAcquireArgs{Keys: m.keys}.Exec(ctx, c)`:        false,
	} {
		if positional.MatchString(line) != want {
			t.Fatalf("positional.MatchString(%q) = %v", line, !want)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Skipf("no module root at %s: %v", root, err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); path != root && err == nil {
				return filepath.SkipDir // another module (bench, otel)
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if positional.MatchString(line) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d: positional KEYS and ARGV; use the script's struct (seam.go): %s", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFlags checks Flags's table against the characters it stands for.
func TestFlags(t *testing.T) {
	t.Parallel()
	for n := range 4 {
		for bits := range 1 << n {
			fs := make([]bool, n)
			want := ""
			for k := range fs {
				fs[k] = bits&(1<<k) != 0
				if fs[k] {
					want += "1"
				} else {
					want += "0"
				}
			}
			if got := scripts.Flags(fs...); got != want {
				t.Errorf("Flags(%v) = %q, want %q", fs, got, want)
			}
		}
	}
}
