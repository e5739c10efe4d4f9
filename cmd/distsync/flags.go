//go:build unix

package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// One flag style for every subcommand: GNU long flags (--timeout 5, --timeout=5), and the
// short aliases flock(1) has (-n, -w 5, -E 3, -s, -x, -c 'CMD'), which may be grouped as
// getopt groups them (-nE 3). A flag given twice takes its last value, as getopt's users do.
// Errors name the flag as the user spelled it and fit on one line.

// flagDef is one flag of a subcommand.
type flagDef struct {
	long  string // its name after "--"
	short byte   // its one-letter alias after "-", 0 if none
	arg   string // the placeholder of its value in the help ("D", "N"); "" for a switch
	help  string // what it does; lines after the first are indented under it
	set   func(v string) error
	// shown, if not nil, is how an error shows the value (a URL without its password).
	shown func(v string) string
}

// flagSet is the flags of one subcommand, in the order its help lists them.
type flagSet struct {
	command string
	defs    []*flagDef
	// moreNames, if not nil, says whether positional arguments are still names past the
	// count parse was given (lock --all): then only "--" ends them.
	moreNames func() bool
}

// usageError is a usage error: its text is one line, and distsync exits 64.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// errHelp is returned by parse for -h or --help.
var errHelp = errors.New("help requested")

func (fs *flagSet) add(long string, short byte, arg, help string, set func(v string) error) {
	fs.defs = append(fs.defs, &flagDef{long: long, short: short, arg: arg, help: help, set: set})
}

// boolean adds a switch that sets *p.
func (fs *flagSet) boolean(p *bool, long string, short byte, help string) {
	fs.add(long, short, "", help, func(string) error { *p = true; return nil })
}

// str adds a flag whose value is any string.
func (fs *flagSet) str(p *string, long string, short byte, arg, help string) {
	fs.add(long, short, arg, help, func(v string) error { *p = v; return nil })
}

// integer adds a flag whose value is an integer from lo to hi.
func (fs *flagSet) integer(p *int64, long string, short byte, arg, help string, lo, hi int64) {
	fs.add(long, short, arg, help, func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("not an integer from %d to %d", lo, hi)
		}
		*p = n
		return nil
	})
}

// count adds a flag whose value is a count from 1 to 2^20.
func (fs *flagSet) count(p *int, long, help string) {
	fs.add(long, 0, "N", help, func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1<<20 {
			return fmt.Errorf("not an integer from 1 to %d", 1<<20)
		}
		*p = n
		return nil
	})
}

// duration adds a flag whose value is a duration (see parseDuration).
func (fs *flagSet) duration(p *time.Duration, long string, short byte, arg, help string) {
	fs.add(long, short, arg, help, func(v string) error {
		d, err := parseDuration(v)
		if err != nil {
			return err
		}
		*p = d
		return nil
	})
}

// maxSeconds is the longest duration a flag takes in seconds: a time.Duration's (292 years).
const maxSeconds = float64(math.MaxInt64 / int64(time.Second))

// parseDuration reads a Go duration (300ms, 1m30s) or plain seconds (2.5), as flock -w takes
// them. Negative, NaN, infinite and overlong values are refused, each saying so.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		switch {
		case ferr != nil && !errors.Is(ferr, strconv.ErrRange):
			return 0, errors.New("not a duration (300ms, 1m30s) nor seconds (2.5)")
		case math.IsNaN(secs):
			return 0, errors.New("not a number of seconds")
		case secs < 0:
			return 0, errors.New("negative duration")
		case secs >= maxSeconds || ferr != nil && secs > 0:
			return 0, fmt.Errorf("longer than the longest duration (%.0f seconds)", maxSeconds)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d < 0 {
		return 0, errors.New("negative duration")
	}
	return d, nil
}

func (fs *flagSet) lookupLong(name string) *flagDef {
	for _, d := range fs.defs {
		if d.long == name {
			return d
		}
	}
	return nil
}

func (fs *flagSet) lookupShort(c byte) *flagDef {
	for _, d := range fs.defs {
		if d.short == c && c != 0 {
			return d
		}
	}
	return nil
}

// parse reads args: flags anywhere, and positional arguments. It stops at "--", and, once
// it has read names positional arguments (names >= 0), at the next argument that is not a
// flag: rest is what follows (CMD and its arguments). It returns errHelp for -h or --help,
// and a usageError for anything malformed.
func (fs *flagSet) parse(args []string, names int) (pos, rest []string, dashdash bool, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return pos, args[i+1:], true, nil
		case a == "-" || !strings.HasPrefix(a, "-"):
			if names >= 0 && len(pos) >= names && (fs.moreNames == nil || !fs.moreNames()) {
				return pos, args[i:], false, nil
			}
			pos = append(pos, a)
		case strings.HasPrefix(a, "--"):
			name, value, hasValue := strings.Cut(a[2:], "=")
			if name == "help" {
				return nil, nil, false, errHelp
			}
			d := fs.lookupLong(name)
			if d == nil {
				return nil, nil, false, usagef("unknown flag --%s", name)
			}
			switch {
			case d.arg == "" && hasValue:
				return nil, nil, false, usagef("--%s takes no value", name)
			case d.arg != "" && !hasValue:
				if i+1 == len(args) {
					return nil, nil, false, usagef("--%s needs a value (%s)", name, d.arg)
				}
				i++
				value = args[i]
			}
			if err := d.set(value); err != nil {
				return nil, nil, false, usagef("--%s %s: %v", name, d.show(value), err)
			}
		default: // one or more short flags: -n, -w5, -w 5, -nE 3
			consumed, err := fs.parseShort(a, args[i+1:])
			if err != nil {
				return nil, nil, false, err
			}
			i += consumed
		}
	}
	return pos, nil, false, nil
}

// parseShort reads a group of short flags, a ("-nx", "-w5"); a flag that takes a value takes
// the rest of the group, or else the next argument. It returns how many of next it used.
func (fs *flagSet) parseShort(a string, next []string) (consumed int, err error) {
	for j := 1; j < len(a); j++ {
		c := a[j]
		if c == 'h' {
			return 0, errHelp
		}
		d := fs.lookupShort(c)
		if d == nil {
			if long, _, _ := strings.Cut(a[1:], "="); len(long) > 1 && fs.lookupLong(long) != nil {
				return 0, usagef("unknown flag %s (long flags take two dashes: --%s)", a, a[1:])
			}
			if j == 1 {
				return 0, usagef("unknown flag -%c", c)
			}
			return 0, usagef("unknown flag -%c in %s", c, a)
		}
		if d.arg == "" {
			_ = d.set("")
			continue
		}
		value := a[j+1:]
		if value == "" {
			if len(next) == 0 {
				return 0, usagef("-%c needs a value (%s)", c, d.arg)
			}
			value, consumed = next[0], 1
		}
		if err := d.set(value); err != nil {
			return 0, usagef("-%c %s: %v", c, d.show(value), err)
		}
		return consumed, nil
	}
	return 0, nil
}

// show returns v as an error shows it.
func (d *flagDef) show(v string) string {
	if d.shown != nil {
		return d.shown(v)
	}
	return shownValue(v)
}

// shownValue quotes a value for an error message if it would not read plainly.
func shownValue(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\n\"'\\") || strconv.Quote(v)[1:len(strconv.Quote(v))-1] != v {
		return strconv.Quote(v)
	}
	return v
}

// helpWidth is the width of the help's lines.
const helpWidth = 88

// wrap breaks s into lines of at most width bytes, between words.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}

// help writes the flags' part of the subcommand's help: one entry per flag, short alias
// first, the help's lines aligned.
func (fs *flagSet) help(b *strings.Builder) {
	const col = 26
	for _, d := range fs.defs {
		head := "      --" + d.long
		if d.short != 0 {
			head = "  -" + string(d.short) + ", --" + d.long
		}
		if d.arg != "" {
			head += " " + d.arg
		}
		lines := wrap(strings.ReplaceAll(d.help, "\n", " "), helpWidth-col)
		if len(head) >= col {
			b.WriteString(head + "\n" + strings.Repeat(" ", col))
		} else {
			b.WriteString(head + strings.Repeat(" ", col-len(head)))
		}
		b.WriteString(lines[0] + "\n")
		for _, l := range lines[1:] {
			b.WriteString(strings.Repeat(" ", col) + l + "\n")
		}
	}
	b.WriteString("  -h, --help" + strings.Repeat(" ", col-len("  -h, --help")) + "print this help\n")
}
