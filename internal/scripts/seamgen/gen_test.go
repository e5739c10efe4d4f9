package seamgen

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dir is package scripts's directory.
const dir = ".."

// TestGeneratedIsFresh checks that seam_gen.go is what the headers and structs give now: run
// go generate ./internal/scripts after changing either.
func TestGeneratedIsFresh(t *testing.T) {
	t.Parallel()
	want, err := Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, Output))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run go generate ./internal/scripts", Output)
	}
}

func readLua(name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) }

// structOf returns the entries of the struct called name, as Generate reads them.
func structOf(t *testing.T, name string) Vectors {
	t.Helper()
	p, err := read(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.seam(name)
	if err != nil {
		t.Fatal(err)
	}
	return s.vectors()
}

// TestMismatchesAreFound feeds the check headers that disagree with their structs: it must
// tell every one.
func TestMismatchesAreFound(t *testing.T) {
	t.Parallel()
	src := func(name string) string {
		b, err := readLua(name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	acquire, fair, renew := src("mutex_acquire.lua"), src("fair_acquire.lua"), src("mutex_renew.lua")
	cases := []struct {
		name   string
		header string
		args   string
	}{
		{"two ARGV swapped", strings.NewReplacer("ARGV[2] ttl ", "ARGV[2] fence_ttl ", "ARGV[3] fence_ttl ", "ARGV[3] ttl ").Replace(acquire), "MutexAcquireArgs"},
		{"an ARGV renamed", strings.Replace(acquire, "ARGV[9] backup ", "ARGV[9] backups ", 1), "MutexAcquireArgs"},
		{"an ARGV more", strings.Replace(acquire, "-- Reply:", "-- ARGV[11] extra  one more\n-- Reply:", 1), "MutexAcquireArgs"},
		{"a KEYS more", strings.Replace(acquire, "-- ARGV[1] ", "-- KEYS[5] rel  one more\n-- ARGV[1] ", 1), "MutexAcquireArgs"},
		{"optional entries made required", strings.Replace(fair, "), also:", "):", 1), "FairAcquireArgs"},
		{"a variadic tail made one key", strings.Replace(renew, "KEYS[4..] keep", "KEYS[4] keep", 1), "MutexRenewArgs"},
		{"a header for another script", acquire, "MutexLeaveArgs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.header == acquire && c.args == "MutexAcquireArgs" {
				t.Fatal("the header was not changed")
			}
			h, err := ParseHeader(c.header, readLua)
			if err != nil {
				return // a header the parser refuses is found out too
			}
			if err := Mismatch(h, structOf(t, c.args)); err == nil {
				t.Errorf("no mismatch found; header %v", h)
			} else {
				t.Log(err)
			}
		})
	}
	t.Run("a gap", func(t *testing.T) {
		if _, err := ParseHeader(strings.Replace(acquire, "-- ARGV[4] waiter ", "-- ARGV[44] waiter ", 1), readLua); err == nil {
			t.Error("ARGV[4] missing: no error")
		}
	})
	t.Run("the true header", func(t *testing.T) {
		h, err := ParseHeader(acquire, readLua)
		if err != nil {
			t.Fatal(err)
		}
		if err := Mismatch(h, structOf(t, "MutexAcquireArgs")); err != nil {
			t.Error(err)
		}
	})
}

// TestBadStructsAreRefused checks what Generate refuses of the Go side: a field it cannot
// read, an optional entry followed by a required one, a struct with no script, and a script
// with no struct.
func TestBadStructsAreRefused(t *testing.T) {
	t.Parallel()
	for name, src := range map[string]string{
		"a field without a tag":                  "type FenceRaiseArgs struct {\n\tFence string `key:\"fence\"`\n\tToken string\n}",
		"an int field":                           "type FenceRaiseArgs struct {\n\tFence int `key:\"fence\"`\n}",
		"a required entry after an optional one": "type FenceRaiseArgs struct {\n\tFence string `key:\"fence\"`\n\tToken string `arg:\"token,opt\"`\n\tFenceTTL string `arg:\"fence\"`\n}",
		"a struct with no script":                "type NoSuchArgs struct {\n\tFence string `key:\"fence\"`\n}",
		"a script with no struct":                "",
	} {
		t.Run(name, func(t *testing.T) {
			d := t.TempDir()
			lua := "-- fence_raise.lua: test\n--\n-- KEYS[1] fence   ARGV[1] token   ARGV[2] fence\nreturn 0\n"
			if err := os.WriteFile(filepath.Join(d, "fence_raise.lua"), []byte(lua), 0o644); err != nil {
				t.Fatal(err)
			}
			goSrc := "package scripts\n\nvar FenceRaise = load(\"fence_raise.lua\")\n\n" + src + "\n"
			if err := os.WriteFile(filepath.Join(d, "x.go"), []byte(goSrc), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := Generate(d); err == nil {
				t.Error("no error")
			} else {
				t.Log(err)
			}
		})
	}
	t.Run("a good one", func(t *testing.T) {
		d := t.TempDir()
		lua := "-- fence_raise.lua: test\n--\n-- KEYS[1] fence   ARGV[1] token   ARGV[2] fence\nreturn 0\n"
		goSrc := "package scripts\n\nvar FenceRaise = load(\"fence_raise.lua\")\n\ntype FenceRaiseArgs struct {\n\tFence string `key:\"fence\"`\n\tToken string `arg:\"token\"`\n\tFenceTTL string `arg:\"fence\"`\n}\n"
		if err := os.WriteFile(filepath.Join(d, "fence_raise.lua"), []byte(lua), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "x.go"), []byte(goSrc), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Generate(d); err != nil {
			t.Fatal(err)
		}
	})
}
