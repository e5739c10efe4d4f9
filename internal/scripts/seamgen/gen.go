package seamgen

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Output is the file Generate writes, in the directory of package scripts.
const Output = "seam_gen.go"

// How a struct is read (fields). A struct called XArgs is the KEYS and ARGV of the script in
// the variable X (X = load("x.lua")), or of every script of the family XScripts (a
// []*Script{...} of such variables), which then share it. Its fields, in order, are its
// entries, an untagged field of a struct type of the package standing for that struct's
// fields in place: `key:"name"` a KEYS entry, `arg:"name"` an ARGV one, ",opt" optional, a
// []string field variadic. The tag's name is the header's, verbatim (fence_ttl, not
// FenceTTL); the field's Go name is free. A struct's optional entries end its KEYS and its
// ARGV, and are sent all together or not at all: when its first optional entry (KEYS before
// ARGV) is set.

// field is one entry of a struct: the Go expression that reads it, and what it is.
type field struct {
	path string // a.Keys.Lock
	vec  int    // 0 KEYS, 1 ARGV
	Entry
}

// seam is one XArgs struct and what it is the KEYS and ARGV of.
type seam struct {
	name    string   // MutexAcquireArgs
	family  string   // RWMutexScripts, or "" for one script
	script  string   // the script's variable, for one script
	files   []string // the scripts' files
	fields  []field
	decider string // the first optional entry's path, or ""
}

// pkg is what Generate reads of package scripts.
type pkg struct {
	structs  map[string]*ast.StructType
	order    []string            // the XArgs types, in the order of the source
	loads    map[string]string   // script variable -> file
	families map[string][]string // XScripts -> script variables
}

// Generate returns seam_gen.go for the package scripts in dir: it reads the package's Go files
// (but tests and Output) and the headers of its scripts. It returns an error, naming what
// differs, if a struct disagrees with its script's header, or a script has no struct.
func Generate(dir string) ([]byte, error) {
	p, err := read(dir)
	if err != nil {
		return nil, err
	}
	readLua := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) }
	var seams []seam
	covered := map[string]int{}
	for _, name := range p.order {
		s, err := p.seam(name)
		if err != nil {
			return nil, err
		}
		for _, f := range s.files {
			covered[f]++
			src, err := readLua(f)
			if err != nil {
				return nil, err
			}
			h, err := ParseHeader(string(src), readLua)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if err := Mismatch(h, s.vectors()); err != nil {
				return nil, fmt.Errorf("%s and %s disagree: %w", f, s.name, err)
			}
		}
		seams = append(seams, s)
	}
	loaded := sortedValues(p.loads)
	for _, f := range loaded {
		if covered[f] != 1 {
			return nil, fmt.Errorf("%s is the script of %d structs, want 1", f, covered[f])
		}
	}
	lua, err := filepath.Glob(filepath.Join(dir, "*.lua"))
	if err != nil {
		return nil, err
	}
	for _, f := range lua {
		if !slices.Contains(loaded, filepath.Base(f)) {
			return nil, fmt.Errorf("%s is not loaded", filepath.Base(f))
		}
	}
	return emit(seams)
}

// Mismatch returns an error describing how header and strct differ, nil if they agree.
func Mismatch(header, strct Vectors) error {
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

func sortedValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// read parses the Go files of dir.
func read(dir string) (*pkg, error) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	p := &pkg{structs: map[string]*ast.StructType{}, loads: map[string]string{}, families: map[string][]string{}}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") || filepath.Base(name) == Output {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		p.file(f)
	}
	return p, nil
}

// file reads the types and script variables of one file.
func (p *pkg) file(f *ast.File) {
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range g.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				if st, ok := s.Type.(*ast.StructType); ok {
					p.structs[s.Name.Name] = st
					if strings.HasSuffix(s.Name.Name, "Args") {
						p.order = append(p.order, s.Name.Name)
					}
				}
			case *ast.ValueSpec:
				for i, n := range s.Names {
					if i < len(s.Values) {
						p.value(n.Name, s.Values[i])
					}
				}
			}
		}
	}
}

// value notes a script variable (X = load("x.lua")) or a family (XScripts = []*Script{...}).
func (p *pkg) value(name string, v ast.Expr) {
	switch e := v.(type) {
	case *ast.CallExpr:
		if id, ok := e.Fun.(*ast.Ident); ok && id.Name == "load" && len(e.Args) == 1 {
			if lit, ok := e.Args[0].(*ast.BasicLit); ok {
				file, _ := strconv.Unquote(lit.Value)
				p.loads[name] = file
			}
		}
	case *ast.CompositeLit:
		if !strings.HasSuffix(name, "Scripts") {
			return
		}
		for _, el := range e.Elts {
			if id, ok := el.(*ast.Ident); ok {
				p.families[name] = append(p.families[name], id.Name)
			}
		}
	}
}

// seam reads the struct called name.
func (p *pkg) seam(name string) (seam, error) {
	s := seam{name: name}
	base := strings.TrimSuffix(name, "Args")
	if vars, ok := p.families[base+"Scripts"]; ok {
		s.family = base + "Scripts"
		for _, v := range vars {
			f, ok := p.loads[v]
			if !ok {
				return seam{}, fmt.Errorf("%s: %s is not a script", s.family, v)
			}
			s.files = append(s.files, f)
		}
	} else if f, ok := p.loads[base]; ok {
		s.script, s.files = base, []string{f}
	} else {
		return seam{}, fmt.Errorf("%s: no script %s = load(...) nor family %sScripts", name, base, base)
	}
	fields, err := p.fields(name, "a")
	if err != nil {
		return seam{}, err
	}
	s.fields = fields
	for v := range 2 {
		opt := false
		for _, f := range s.fields {
			if f.vec != v {
				continue
			}
			if opt && !f.Opt {
				return seam{}, fmt.Errorf("%s: %s follows an optional entry: optional entries end their vector", name, f.path)
			}
			opt = opt || f.Opt
			if f.Opt && s.decider == "" {
				s.decider = f.path
			}
		}
	}
	return s, nil
}

// fields returns the entries of the struct typ, read through path.
func (p *pkg) fields(typ, path string) ([]field, error) {
	st, ok := p.structs[typ]
	if !ok {
		return nil, fmt.Errorf("%s is not a struct type of the package", typ)
	}
	var out []field
	for _, f := range st.Fields.List {
		if len(f.Names) != 1 {
			return nil, fmt.Errorf("%s: one name a field, please", typ)
		}
		name := f.Names[0].Name
		var tag reflect.StructTag
		if f.Tag != nil {
			raw, _ := strconv.Unquote(f.Tag.Value)
			tag = reflect.StructTag(raw)
		}
		key, isKey := tag.Lookup("key")
		arg, isArg := tag.Lookup("arg")
		if !isKey && !isArg {
			id, ok := f.Type.(*ast.Ident)
			if !ok {
				return nil, fmt.Errorf("%s.%s: want one tag, key or arg", typ, name)
			}
			in, err := p.fields(id.Name, path+"."+name)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", typ, name, err)
			}
			out = append(out, in...)
			continue
		}
		if isKey && isArg {
			return nil, fmt.Errorf("%s.%s: want one tag, key or arg", typ, name)
		}
		v, t := 0, key
		if isArg {
			v, t = 1, arg
		}
		entry, opts, _ := strings.Cut(t, ",")
		if opts != "" && opts != "opt" {
			return nil, fmt.Errorf("%s.%s: unknown tag option %q", typ, name, opts)
		}
		variadic := false
		switch ty := f.Type.(type) {
		case *ast.Ident:
			if ty.Name != "string" {
				return nil, fmt.Errorf("%s.%s: a %s, not a string or []string", typ, name, ty.Name)
			}
		case *ast.ArrayType:
			if id, ok := ty.Elt.(*ast.Ident); !ok || id.Name != "string" || ty.Len != nil {
				return nil, fmt.Errorf("%s.%s: not a string or []string", typ, name)
			}
			variadic = true
		default:
			return nil, fmt.Errorf("%s.%s: not a string or []string", typ, name)
		}
		out = append(out, field{path: path + "." + name, vec: v, Entry: Entry{Name: entry, Variadic: variadic, Opt: opts == "opt"}})
	}
	return out, nil
}

// vectors returns the struct's entries as a header gives them.
func (s seam) vectors() Vectors {
	var h Vectors
	for _, f := range s.fields {
		h[f.vec] = append(h[f.vec], f.Entry)
	}
	return h
}

// emit writes the file.
func emit(seams []seam) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`// Code generated by seamgen from the headers of the .lua files; DO NOT EDIT.

package scripts

import (
	"context"

	"github.com/redis/rueidis"
)
`)
	for _, s := range seams {
		s.emit(&b)
	}
	out, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("gofmt: %w\n%s", err, b.Bytes())
	}
	return out, nil
}

func (s seam) emit(b *bytes.Buffer) {
	what, param, arg, script := s.files[0], "", "", s.script
	if s.family != "" {
		what = "s (one of " + strings.Join(s.files, ", ") + ")"
		param, arg, script = ", s *Script", "s, ", "s"
	}
	fmt.Fprintf(b, "\n// Exec runs %s once with a, as [Script.Exec] does.\n", what)
	fmt.Fprintf(b, "func (a %s) Exec(ctx context.Context, c rueidis.Client%s) rueidis.RedisResult {\n", s.name, param)
	fmt.Fprintf(b, "\tvar buf [MaxArgs]string\n\treturn a.fill(%sbuf[:0]).Exec(ctx, c)\n}\n", arg)
	fmt.Fprintf(b, "\n// Call returns a as a call of %s.\n", what)
	fmt.Fprintf(b, "func (a %s) Call(%s) Call { return a.fill(%smake([]string, 0, %s)) }\n",
		s.name, strings.TrimPrefix(param, ", "), arg, s.capacity())
	fmt.Fprintf(b, "\nfunc (a %s) fill(%sv []string) Call {\n", s.name, strings.TrimPrefix(param+", ", ", "))
	if s.family != "" {
		fmt.Fprintf(b, "\tmustBeOne(%q, s, %s)\n", s.name, s.family)
	}
	if s.decider != "" {
		fmt.Fprintf(b, "\tif %s == \"\" {\n", s.decider)
		s.sends(b, script, false)
		b.WriteString("\t}\n")
	}
	s.sends(b, script, true)
	b.WriteString("}\n")
}

// capacity is the expression of the number of strings a call of every field sends.
func (s seam) capacity() string {
	n, out := 0, ""
	for _, f := range s.fields {
		if f.Variadic {
			out += "+len(" + f.path + ")"
		} else {
			n++
		}
	}
	if n == 0 && out != "" {
		return strings.TrimPrefix(out, "+")
	}
	return strconv.Itoa(n) + out
}

// sends writes the appends and the split of one call: with its optional entries or without.
func (s seam) sends(b *bytes.Buffer, script string, opt bool) {
	var run []string
	flush := func() {
		if len(run) > 0 {
			fmt.Fprintf(b, "\tv = append(v, %s)\n", strings.Join(run, ", "))
			run = nil
		}
	}
	nk, counted := 0, true
	for v := range 2 {
		if v == 1 && !counted {
			flush()
			b.WriteString("\tnk := len(v)\n")
		}
		for _, f := range s.fields {
			if f.vec != v || f.Opt && !opt {
				continue
			}
			if f.Variadic {
				flush()
				fmt.Fprintf(b, "\tv = append(v, %s...)\n", f.path)
				if v == 0 {
					counted = false
				}
				continue
			}
			run = append(run, f.path)
			if v == 0 {
				nk++
			}
		}
	}
	flush()
	split := strconv.Itoa(nk)
	if !counted {
		split = "nk"
	}
	fmt.Fprintf(b, "\treturn split(%s, v, %s)\n", script, split)
}
