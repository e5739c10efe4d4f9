package scripts

//go:generate go run ./seamgen/cmd

// The seam between Go and Lua. Every script's KEYS and ARGV are one Go struct with a field per
// entry of the script's header (MutexAcquireArgs for mutex_acquire.lua, beside the script's
// variable MutexAcquire), and the struct's Exec and Call put them in the header's order: a
// caller names every key and argument, and builds no positional slice. Scripts that share all
// their KEYS and ARGV (those of a rwmutex, a semaphore, a wait group, a rate limiter:
// lib/rw.lua, lib/sem.lua, lib/waitgroup.lua, lib/rate.lua) share one struct, XArgs for the
// family XScripts, whose Exec and Call take the script.
//
// The structs are written here; their Exec, Call and fill are generated from the scripts'
// headers (go generate ./internal/scripts writes seam_gen.go; package seamgen), which refuses
// a struct whose fields disagree with its script's header, in order or count:
//
//   - `key:"name"` is a KEYS entry and `arg:"name"` an ARGV entry, in the order of the fields.
//     name is the header's, verbatim ("fence_ttl"). The Go name is free: by convention it is
//     the header's name in CamelCase (FenceTTL); a second entry of the same name says what it
//     is for (Record.TTL, the record's ttl in fair_acquire.lua).
//   - A []string field is a variadic tail, "KEYS[n..] name" in the header; or the whole vector,
//     where the header describes it in prose ("-- KEYS: ..."): then its name is KEYS or ARGV.
//   - ",opt" marks an optional entry: the header lists it after a line that ends "also:", or
//     calls it optional. Optional entries end their vector, and a struct's are sent all
//     together or not at all: when the first of them (KEYS before ARGV) is set.
//   - An untagged struct field (a MutexKeys, a Record) stands for its own fields, in place.
//
// Exec builds the slices in a buffer on its own stack: running a script allocates nothing for
// its keys and arguments. Call allocates one array for both (none if the compiler inlines Call
// and the Call does not escape), as a Call kept for later, a renewal, must.

// MaxArgs is the size of Exec's buffer: at least the KEYS and ARGV of every script but those
// with a variadic tail (whose longer calls make append allocate).
const MaxArgs = 24

// Flags returns a flags argument: '1' or '0' for each of fs, in order (mutex_acquire.lua's
// and reentrant_lock.lua's flags, and the single-flag arguments), as a constant string: no
// allocation on the hot path. It takes up to three flags, as the scripts do.
func Flags(fs ...bool) string {
	bits := 0
	for k, f := range fs {
		if f {
			bits |= 1 << k
		}
	}
	return flagSets[len(fs)][bits]
}

// flagSets[n][bits] is Flags of n flags, the first flag bit 0.
var flagSets = [4][]string{
	{""},
	{"0", "1"},
	{"00", "10", "01", "11"},
	{"000", "100", "010", "110", "001", "101", "011", "111"},
}

// split returns the call of s whose KEYS are the first nk strings of v and ARGV the rest.
func split(s *Script, v []string, nk int) Call {
	return Call{Script: s, Keys: v[:nk:nk], Args: v[nk:]}
}

// mustBeOne panics unless s is one of the scripts of family, whose shared struct is typ.
func mustBeOne(typ string, s *Script, family []*Script) {
	for _, f := range family {
		if f == s {
			return
		}
	}
	panic("scripts: " + typ + " is not the KEYS and ARGV of " + s.name)
}
