// Package seamgen generates the seam between Go and the Lua scripts of package scripts
// (seam_gen.go): each struct's Exec, Call and fill, which send its fields as KEYS and ARGV in
// the order the script's header names them. The headers decide the order and the number; the
// structs, hand-written beside their primitives' scripts, only name the entries for Go. A
// struct that disagrees with its script's header is refused, with what differs.
package seamgen

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// How a header is read (ParseHeader). The header is the comment block a .lua file starts
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

// Entry is one KEYS or ARGV entry, as a header or a struct gives it.
type Entry struct {
	Name     string
	Variadic bool // a tail of any length: KEYS[i..], or the whole vector
	Opt      bool
}

func (e Entry) String() string {
	s := e.Name
	if e.Variadic {
		s += ".."
	}
	if e.Opt {
		s += "?"
	}
	return s
}

// Vectors are a script's entries: [0] KEYS, [1] ARGV.
type Vectors [2][]Entry

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

// ParseHeader returns the KEYS and ARGV that the header of src names (see above); read reads
// the lib files it refers to.
func ParseHeader(src string, read func(string) ([]byte, error)) (Vectors, error) {
	p := &headerParser{read: read, byIndex: [2]map[int]*Entry{{}, {}}, block: -1}
	for _, line := range strings.Split(src, "\n") {
		text, ok := strings.CutPrefix(line, "--")
		if !ok || strings.HasPrefix(line, "-- #include ") {
			break // the header ends
		}
		if err := p.line(strings.TrimPrefix(text, " ")); err != nil {
			return Vectors{}, err
		}
	}
	var h Vectors
	for v := range p.byIndex {
		for i := 1; i <= len(p.byIndex[v]); i++ {
			e, ok := p.byIndex[v][i]
			if !ok {
				return Vectors{}, fmt.Errorf("%s[%d] is missing", vecNames[v], i)
			}
			if e.Variadic && i != len(p.byIndex[v]) {
				return Vectors{}, fmt.Errorf("%s[%d..] is not last", vecNames[v], i)
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
	byIndex  [2]map[int]*Entry
	last     *Entry // the entry whose description goes on
	block    int    // the vector of a lib file's block, -1 outside one
	optional bool   // past a line that ends
}

// put records e as entry i of vector v.
func (p *headerParser) put(v, i int, e Entry) error {
	if old, ok := p.byIndex[v][i]; ok {
		if old.Name != e.Name || old.Variadic != e.Variadic {
			return fmt.Errorf("%s[%d] is %s and %s", vecNames[v], i, old, e)
		}
		old.Opt = old.Opt || e.Opt
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
		return p.put(vec(m[1]), 1, Entry{Name: m[1], Variadic: true, Opt: p.optional})
	}
	re := entryRE
	if p.block >= 0 {
		re = libEntryRE
	}
	found := re.FindAllStringSubmatchIndex(text, -1)
	if len(found) == 0 {
		switch {
		case indented && p.last != nil:
			p.last.Opt = p.last.Opt || strings.Contains(text, "optional")
		case strings.HasSuffix(strings.TrimSpace(text), "also:"):
			p.optional, p.last = true, nil
		default:
			p.last = nil
		}
		return nil
	}
	for j, m := range found {
		v, e := p.block, Entry{Opt: p.optional}
		var idx string
		if p.block >= 0 {
			idx, e.Name = text[m[2]:m[3]], text[m[4]:m[5]]
		} else {
			v, idx, e.Variadic, e.Name = vec(text[m[2]:m[3]]), text[m[4]:m[5]], m[6] >= 0, text[m[8]:m[9]]
		}
		end := len(text)
		if j+1 < len(found) {
			end = found[j+1][0]
		}
		e.Opt = e.Opt || strings.Contains(text[m[1]:end], "optional")
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
	h, err := ParseHeader(string(src), p.read)
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
