// Package keys lays out the Redis keys and pub/sub channels of a primitive.
//
// Every key of one primitive shares one hash tag, so multi-key scripts stay in one slot on
// Redis Cluster:
//
//	<prefix>{<name>}:<kind>[:<part>]
//
// The name is escaped so that no name can move the hash tag: '%', '{' and '}' become %25, %7B
// and %7D. Escaping is injective, so two different names never share keys, and an escaped
// name never contains a brace, so the tag is always exactly the escaped name.
package keys

import (
	"errors"
	"strings"
)

// Space is the key space of one primitive: a prefix, an escaped name and the primitive's kind.
type Space struct {
	base string // <prefix>{<escaped name>}:<kind>
}

// New returns the key space of the primitive kind named name under prefix. It reports an
// error for an empty name and for a prefix holding a brace (which would move the hash tag).
func New(prefix, kind, name string) (Space, error) {
	if name == "" {
		return Space{}, errors.New("empty name")
	}
	if err := CheckPrefix(prefix); err != nil {
		return Space{}, err
	}
	return Space{base: prefix + "{" + Escape(name) + "}:" + kind}, nil
}

// CheckPrefix reports whether prefix can start keys: it must not hold '{' or '}'.
func CheckPrefix(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return errors.New("key prefix must not contain '{' or '}'")
	}
	return nil
}

// Key returns the primitive's main key.
func (s Space) Key() string { return s.base }

// Part returns the key of one part of the primitive, such as "fence" or "q".
func (s Space) Part(part string) string { return s.base + ":" + part }

// Channel returns the prefix of the primitive's pub/sub channels: each waiting process
// listens on Channel() + ":" + its waiter id, so that a release wakes only the process it
// hands the claim to. The channels carry the keys' hash tag, so a sharded publish from a
// script stays in the script's slot.
func (s Space) Channel() string { return s.base + ":ch" }

// Escape returns name with '%', '{' and '}' percent-encoded.
func Escape(name string) string {
	if !strings.ContainsAny(name, "%{}") {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 8)
	for i := 0; i < len(name); i++ {
		switch c := name[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// Parse returns the kind and the (unescaped) name of the primitive whose key, under prefix,
// key is: the inverse of New and Space's Key and Part. ok is false for a key that is not of
// that form.
func Parse(prefix, key string) (kind, name string, ok bool) {
	rest, ok := strings.CutPrefix(key, prefix+"{")
	if !ok {
		return "", "", false
	}
	esc, tail, ok := strings.Cut(rest, "}") // an escaped name holds no brace
	if !ok {
		return "", "", false
	}
	if tail, ok = strings.CutPrefix(tail, ":"); !ok {
		return "", "", false
	}
	kind, _, _ = strings.Cut(tail, ":")
	name, ok = Unescape(esc)
	return kind, name, ok && name != "" && kind != ""
}

// Unescape reverses Escape: %25, %7B and %7D become '%', '{' and '}'. It reports false
// for what Escape never makes.
func Unescape(s string) (string, bool) {
	if !strings.ContainsAny(s, "%{}") {
		return s, true
	}
	if strings.ContainsAny(s, "{}") {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+3 > len(s) {
			return "", false
		}
		switch s[i+1 : i+3] {
		case "25":
			b.WriteByte('%')
		case "7B":
			b.WriteByte('{')
		case "7D":
			b.WriteByte('}')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

// Slot returns Redis Cluster's hash slot of key: CRC16 (XMODEM) of its hash tag, or of the
// whole key when it has no non-empty {...} section, modulo 16384. Every key of a Space has the
// slot of its escaped name.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}
