package scripts_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/distsync/distsync/internal/scripts"
)

// luaFiles are the package's .lua files (go test runs in the package's directory).
var luaFiles = os.DirFS(".")

func readLua(name string) ([]byte, error) { return fs.ReadFile(luaFiles, name) }

// The test of the seam (seam.go): every script's struct names its KEYS and ARGV as the
// script's header does, in the same order and number, and its Call sends them in that order.
//
// How a header is read (parseHeader). The header is the comment block a .lua file starts
// with. An entry is "KEYS[i] name" or "ARGV[i] name" at the start of a line's text or after
// two spaces or more (so that several fit on one line, and "(ARGV[2])" inside a description
// is no entry); its name is the word that follows (letters, digits, '_'; "extra:" is extra).
// "KEYS[i..] name" is a variadic tail. "-- KEYS: ..." (or ARGV) describes the whole vector in
// prose: one variadic entry named KEYS (or ARGV). "KEYS and ARGV: see lib/x.lua" takes the
// entries of lib/x.lua's blocks "-- KEYS, ..." and "-- ARGV, ...", whose indented lines give
// them as "[i] name"; the script's own entries may repeat some, by the same name. An entry is
// optional if its description (with its indented continuation lines) says "optional", or if
// it comes after a line that ends "also:". Entries are ordered by index, which must run from
// 1 without a gap.
//
// How a struct is read (structEntries): its fields in order, an untagged struct field standing
// for its own; `key:"name"` a KEYS entry, `arg:"name"` an ARGV one, ",opt" optional, a
// []string field variadic. The tag's name is the header's, verbatim: fence_ttl, not FenceTTL,
// so that a name that is no Go identifier needs no rule to map it; the field's Go name is
// free (two entries may share a header name, as fair_acquire.lua's two ttl).

// entry is one KEYS or ARGV entry, as a header or a struct gives it.
type entry struct {
	name     string
	variadic bool
	opt      bool
}

func (e entry) String() string {
	s := e.name
	if e.variadic {
		s += ".."
	}
	if e.opt {
		s += "?"
	}
	return s
}

// vectors are a script's entries: [0] KEYS, [1] ARGV.
type vectors [2][]entry

func vec(name string) int {
	if name == "ARGV" {
		return 1
	}
	return 0
}

var (
	entryRE    = regexp.MustCompile(`(?:^|\s{2,})(KEYS|ARGV)\[(\d+)(\.\.)?\]\s+([A-Za-z_][A-Za-z0-9_]*)`)
	libEntryRE = regexp.MustCompile(`(?:^|\s{2,})\[(\d+)\]\s+([A-Za-z_][A-Za-z0-9_]*)`)
	proseRE    = regexp.MustCompile(`^(KEYS|ARGV): `)
	blockRE    = regexp.MustCompile(`^(KEYS|ARGV), `)
	seeRE      = regexp.MustCompile(`^KEYS and ARGV: see (lib/[a-z_]+\.lua)`)
)

// parseHeader returns the KEYS and ARGV that the header of src names (see above); read reads
// the lib files it refers to.
func parseHeader(src string, read func(string) ([]byte, error)) (vectors, error) {
	p := &headerParser{read: read, byIndex: [2]map[int]*entry{{}, {}}, block: -1}
	for _, line := range strings.Split(src, "\n") {
		text, ok := strings.CutPrefix(line, "--")
		if !ok || strings.HasPrefix(line, "-- #include ") {
			break // the header ends
		}
		if err := p.line(strings.TrimPrefix(text, " ")); err != nil {
			return vectors{}, err
		}
	}
	var h vectors
	for v := range p.byIndex {
		for i := 1; i <= len(p.byIndex[v]); i++ {
			e, ok := p.byIndex[v][i]
			if !ok {
				return vectors{}, fmt.Errorf("%s[%d] is missing", vecNames[v], i)
			}
			if e.variadic && i != len(p.byIndex[v]) {
				return vectors{}, fmt.Errorf("%s[%d..] is not last", vecNames[v], i)
			}
			h[v] = append(h[v], *e)
		}
	}
	return h, nil
}

var vecNames = [2]string{"KEYS", "ARGV"}

// headerParser is parseHeader's state.
type headerParser struct {
	read     func(string) ([]byte, error)
	byIndex  [2]map[int]*entry
	last     *entry // the entry whose description goes on
	block    int    // the vector of a lib file's block, -1 outside one
	optional bool   // past a line that ends
}

// put records e as entry i of vector v.
func (p *headerParser) put(v, i int, e entry) error {
	if old, ok := p.byIndex[v][i]; ok {
		if old.name != e.name || old.variadic != e.variadic {
			return fmt.Errorf("%s[%d] is %s and %s", vecNames[v], i, old, e)
		}
		old.opt = old.opt || e.opt
	} else {
		p.byIndex[v][i] = &e
	}
	p.last = p.byIndex[v][i]
	return nil
}

// line reads the text of one line of the header, after its "-- ".
func (p *headerParser) line(text string) error {
	indented := strings.HasPrefix(text, " ")
	if !indented {
		p.block = -1
	}
	if m := seeRE.FindStringSubmatch(text); m != nil {
		return p.lib(m[1])
	}
	if m := blockRE.FindStringSubmatch(text); m != nil {
		p.block, p.last = vec(m[1]), nil
		return nil
	}
	if m := proseRE.FindStringSubmatch(text); m != nil {
		return p.put(vec(m[1]), 1, entry{name: m[1], variadic: true, opt: p.optional})
	}
	re := entryRE
	if p.block >= 0 {
		re = libEntryRE
	}
	found := re.FindAllStringSubmatchIndex(text, -1)
	if len(found) == 0 {
		switch {
		case indented && p.last != nil:
			p.last.opt = p.last.opt || strings.Contains(text, "optional")
		case strings.HasSuffix(strings.TrimSpace(text), "also:"):
			p.optional, p.last = true, nil
		default:
			p.last = nil
		}
		return nil
	}
	for j, m := range found {
		v, e := p.block, entry{opt: p.optional}
		var idx string
		if p.block >= 0 {
			idx, e.name = text[m[2]:m[3]], text[m[4]:m[5]]
		} else {
			v, idx, e.variadic, e.name = vec(text[m[2]:m[3]]), text[m[4]:m[5]], m[6] >= 0, text[m[8]:m[9]]
		}
		end := len(text)
		if j+1 < len(found) {
			end = found[j+1][0]
		}
		e.opt = e.opt || strings.Contains(text[m[1]:end], "optional")
		i, _ := strconv.Atoi(idx)
		if err := p.put(v, i, e); err != nil {
			return err
		}
	}
	return nil
}

// lib takes the entries of the lib file name.
func (p *headerParser) lib(name string) error {
	src, err := p.read(name)
	if err != nil {
		return err
	}
	h, err := parseHeader(string(src), p.read)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for v := range h {
		for i, e := range h[v] {
			if err := p.put(v, i+1, e); err != nil {
				return err
			}
		}
	}
	p.last = nil
	return nil
}

// structEntries returns the KEYS and ARGV that the fields of struct type t name (see above).
func structEntries(t reflect.Type) (vectors, error) {
	var h vectors
	for i := range t.NumField() {
		f := t.Field(i)
		key, isKey := f.Tag.Lookup("key")
		arg, isArg := f.Tag.Lookup("arg")
		switch {
		case isKey == isArg && !isKey && f.Type.Kind() == reflect.Struct:
			in, err := structEntries(f.Type)
			if err != nil {
				return vectors{}, err
			}
			h[0], h[1] = append(h[0], in[0]...), append(h[1], in[1]...)
			continue
		case isKey == isArg:
			return vectors{}, fmt.Errorf("%s.%s: want one tag, key or arg", t.Name(), f.Name)
		case f.Type != reflect.TypeFor[string]() && f.Type != reflect.TypeFor[[]string]():
			return vectors{}, fmt.Errorf("%s.%s: a %s, not a string or []string", t.Name(), f.Name, f.Type)
		}
		v, tag := 0, key
		if isArg {
			v, tag = 1, arg
		}
		name, opts, _ := strings.Cut(tag, ",")
		if opts != "" && opts != "opt" {
			return vectors{}, fmt.Errorf("%s.%s: unknown tag option %q", t.Name(), f.Name, opts)
		}
		h[v] = append(h[v], entry{name: name, variadic: f.Type.Kind() == reflect.Slice, opt: opts == "opt"})
	}
	return h, nil
}

// mismatch returns an error describing how header and strct differ, nil if they agree.
func mismatch(header, strct vectors) error {
	var diffs []string
	for v, name := range vecNames {
		if !slices.Equal(header[v], strct[v]) {
			diffs = append(diffs, fmt.Sprintf("%s: header %v, struct %v", name, header[v], strct[v]))
		}
	}
	if diffs == nil {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(diffs, "; "))
}

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

func readHeader(t *testing.T, s *scripts.Script) vectors {
	t.Helper()
	src, err := readLua(s.Name())
	if err != nil {
		t.Fatal(err)
	}
	h, err := parseHeader(string(src), readLua)
	if err != nil {
		t.Fatalf("%s: %v", s.Name(), err)
	}
	return h
}

// TestSeamMatchesHeaders checks every script's struct against its header.
func TestSeamMatchesHeaders(t *testing.T) {
	t.Parallel()
	for _, sm := range seams {
		typ := reflect.TypeOf(sm.args)
		want, err := structEntries(typ)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sm.scripts {
			if err := mismatch(readHeader(t, s), want); err != nil {
				t.Errorf("%s and %s disagree: %v", s.Name(), typ.Name(), err)
			}
		}
	}
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
				if opt && !variadic(structEntriesOf(t, v.Type())) {
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

// variadic reports whether h has a variadic entry.
func variadic(h vectors) bool {
	for _, es := range h {
		for _, e := range es {
			if e.variadic {
				return true
			}
		}
	}
	return false
}

func structEntriesOf(t *testing.T, typ reflect.Type) vectors {
	t.Helper()
	h, err := structEntries(typ)
	if err != nil {
		t.Fatal(err)
	}
	return h
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

// TestSeamCheckerFindsMismatches feeds the checker headers that disagree with their structs:
// it must tell every one.
func TestSeamCheckerFindsMismatches(t *testing.T) {
	t.Parallel()
	src := func(s *scripts.Script) string {
		b, err := readLua(s.Name())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	acquire, fair, renew := src(scripts.MutexAcquire), src(scripts.FairAcquire), src(scripts.MutexRenew)
	cases := []struct {
		name   string
		header string
		args   any
	}{
		{"two ARGV swapped", strings.NewReplacer("ARGV[2] ttl ", "ARGV[2] fence_ttl ", "ARGV[3] fence_ttl ", "ARGV[3] ttl ").Replace(acquire),
			scripts.MutexAcquireArgs{}},
		{"an ARGV renamed", strings.Replace(acquire, "ARGV[9] backup ", "ARGV[9] backups ", 1), scripts.MutexAcquireArgs{}},
		{"an ARGV more", strings.Replace(acquire, "-- Reply:", "-- ARGV[11] extra  one more\n-- Reply:", 1), scripts.MutexAcquireArgs{}},
		{"a KEYS more", strings.Replace(acquire, "-- ARGV[1] ", "-- KEYS[5] rel  one more\n-- ARGV[1] ", 1), scripts.MutexAcquireArgs{}},
		{"optional entries made required", strings.Replace(fair, "), also:", "):", 1), scripts.FairAcquireArgs{}},
		{"a variadic tail made one key", strings.Replace(renew, "KEYS[4..] keep", "KEYS[4] keep", 1), scripts.MutexRenewArgs{}},
		{"a header for another script", acquire, scripts.MutexLeaveArgs{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.header == acquire && c.args == (scripts.MutexAcquireArgs{}) {
				t.Fatal("the header was not changed")
			}
			h, err := parseHeader(c.header, readLua)
			if err != nil {
				return // a header the parser refuses is found out too
			}
			if err := mismatch(h, structEntriesOf(t, reflect.TypeOf(c.args))); err == nil {
				t.Errorf("no mismatch found; header %v", h)
			} else {
				t.Log(err)
			}
		})
	}
	t.Run("a gap", func(t *testing.T) {
		if _, err := parseHeader(strings.Replace(acquire, "-- ARGV[4] waiter ", "-- ARGV[44] waiter ", 1), readLua); err == nil {
			t.Error("ARGV[4] missing: no error")
		}
	})
	t.Run("the true header", func(t *testing.T) {
		h, err := parseHeader(acquire, readLua)
		if err != nil {
			t.Fatal(err)
		}
		if err := mismatch(h, structEntriesOf(t, reflect.TypeFor[scripts.MutexAcquireArgs]())); err != nil {
			t.Error(err)
		}
	})
	t.Run("a field without a tag", func(t *testing.T) {
		type bad struct {
			Lock string `key:"lock"`
			Pub  string
		}
		if _, err := structEntries(reflect.TypeFor[bad]()); err == nil {
			t.Error("no error")
		}
	})
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
