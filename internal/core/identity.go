package core

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// MaxIdentity is the longest identity a handle takes, in bytes (see distsync.MaxIdentityLen).
const MaxIdentity = 64

// Where a handle's identity lives: in its id, and so in every owner value and waiter id it
// makes (NewID), which is what Redis keeps and what the holders and inspect scripts return.
// A handle id is
//
//	<escaped identity>.<random>
//
// where random is 12 random bytes in unpadded base64url (16 characters, never a '.'), so the
// identity is everything before the id's last '.'. The escape leaves only bytes that no
// script or parser of ids gives a meaning: it percent-encodes (%XX, upper-case hex) every
// byte but ASCII letters, digits and idSafe. What it must keep out, and why:
//
//	':'  ends the handle id in an owner value or waiter id (HandleOf), and ends a grant's
//	     waiter ('~<waiter>:<token>')
//	'/'  ends a waiter's process in a per-call waiter id ('<process>/<call>': the channel a
//	     script publishes to, lib/queue.lua's tell)
//	','  separates the watchers a grant's message lists (lib/queue.lua)
//	' '  separates the fields of every message (waitq.ParseQueued, election's announcement)
//	'~'  starts a grant, '{' '}' a key's hash tag (a once result key holds an owner value),
//	'%'  starts an escape; and control and non-ASCII bytes, which an operator's terminal
//	     should not receive raw.
//
// So an identity of n bytes makes an id of at most 3n + 17 bytes.
const idSafe = "-_.@+="

// randomIDLen is the length of a handle id's random part: 12 bytes in unpadded base64url.
const randomIDLen = 16

// maxIDLen is the longest handle id: an identity of MaxIdentity bytes that all escape, '.'
// and the random part.
const maxIDLen = 3*MaxIdentity + 1 + randomIDLen

// DefaultIdentity returns the identity of a handle given none: "<host name>:<process id>",
// with "unknown" for a host name the system does not give.
func DefaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// checkIdentity reports what is wrong with identity as a handle's: empty, or longer than
// MaxIdentity bytes.
func checkIdentity(identity string) error {
	switch {
	case identity == "":
		return errors.New("identity must not be empty")
	case len(identity) > MaxIdentity:
		return fmt.Errorf("identity must be at most %d bytes, got %d", MaxIdentity, len(identity))
	}
	return nil
}

func idSafeByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(idSafe, c) >= 0
}

// escapeIdentity returns identity as the first part of a handle id (see idSafe).
func escapeIdentity(identity string) string {
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, 3*len(identity))
	for i := 0; i < len(identity); i++ {
		if c := identity[i]; idSafeByte(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return string(b)
}

// unescapeIdentity reverses escapeIdentity; ok is false for what it never makes (a bad or
// lower-case escape, an escape of a safe byte, a byte it escapes).
func unescapeIdentity(s string) (identity string, ok bool) {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if !idSafeByte(c) {
				return "", false
			}
			b = append(b, c)
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		hi, lo := unhex(s[i+1]), unhex(s[i+2])
		if hi < 0 || lo < 0 || idSafeByte(byte(hi<<4|lo)) {
			return "", false
		}
		b = append(b, byte(hi<<4|lo))
		i += 2
	}
	return string(b), true
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// IdentityOf returns the identity of the handle that made an owner value, a waiter id (see
// NewID; a grant's '~' is taken off) or a handle id: "" for one that carries none, as the ids
// of a handle of a version before identities do ('<random>:<n>').
func IdentityOf(id string) string {
	if h := HandleOf(id); h != "" {
		id = h
	}
	i := strings.LastIndexByte(id, '.')
	if i < 0 {
		return ""
	}
	identity, ok := unescapeIdentity(id[:i])
	if !ok {
		return ""
	}
	return identity
}
