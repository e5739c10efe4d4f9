package once

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/distsync/distsync/internal/core"
	"github.com/distsync/distsync/internal/keys"
)

// fuzzStruct is a result type with the shapes JSON results usually have.
type fuzzStruct struct {
	ID    int               `json:"id"`
	Name  string            `json:"name"`
	Tags  []string          `json:"tags,omitempty"`
	Attrs map[string]any    `json:"attrs,omitempty"`
	Next  *fuzzStruct       `json:"next,omitempty"`
	Raw   map[string]string `json:"raw,omitempty"`
}

// FuzzDecode feeds Group.decode any stored or published result, as a foreign value under a
// once key's kept or res:<leader> key, or a foreign PUBLISH on its channel, would.
//
// A result is one status byte and a payload (internal/scripts/once_begin.lua): 'v' and the
// encoded value, 'e' and the leader's error message, 'p' and its panic, 'g' for a
// runtime.Goexit. Property, for a Group of each default codec (JSON, String, Bytes), JSON of
// a struct, and OnceValues' pair: decode never panics; "" is an error matching ErrCodec; 'v'
// gives exactly what the codec decodes from the payload, or an error matching ErrCodec when
// the codec refuses it; 'p' gives an error matching ErrPanicked, 'e' one matching
// ErrLeaderFailed, both with the message; 'g' one matching ErrGoexit; any other status byte
// gives an error (ErrLeaderFailed or ErrCodec). A non-nil error never comes with a value other
// than the zero value.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		"", "v", "v42", "v-0", "v1e3", "vnull", "v\"x\"", "v{}", "v[]", "v{\"id\":1,\"name\":\"n\"}",
		"v{\"id\":1e400}", "v\xff", "e", "eboom", "p", "pboom", "x", "\x00", "V42", "v 42 ", "v42x",
		"v{\"next\":{\"next\":{\"id\":3}}}", "v[1,2,3]", "v\"\\ud800\"",
		"g", "gx", "v[1,\"a\"]", "v[1]", "v[1,\"a\",2]", "v[null,null]", "v[\"1\",1]",
	} {
		f.Add(seed)
	}
	gi := testGroup[int](JSON[int]())
	gs := testGroup[string](String())
	gb := testGroup[[]byte](Bytes())
	gst := testGroup[fuzzStruct](JSON[fuzzStruct]())
	gp := testGroup[pair[int, string]](pairCodec[int, string]{})
	f.Fuzz(func(t *testing.T, res string) {
		checkDecode(t, gi, res)
		checkDecode(t, gs, res)
		checkDecode(t, gb, res)
		checkDecode(t, gst, res)
		checkDecode(t, gp, res)
	})
}

func testGroup[T any](c Codec[T]) *Group[T] {
	return &Group[T]{name: "g", codec: c, maxSize: DefaultMaxValueSize}
}

func checkDecode[T any](t *testing.T, g *Group[T], res string) {
	t.Helper()
	v, err := g.decode("k", res)
	var zero T
	if err != nil && !reflect.DeepEqual(v, zero) {
		t.Fatalf("decode(%q) as %T: error %v with value %#v", res, zero, err, v)
	}
	switch {
	case res == "":
		if !errors.Is(err, ErrCodec) {
			t.Fatalf("decode(%q) as %T = %#v, %v; want ErrCodec", res, zero, v, err)
		}
	case res[0] == 'v':
		want, werr := g.codec.Decode([]byte(res[1:]))
		switch {
		case werr != nil && !errors.Is(err, ErrCodec):
			t.Fatalf("decode(%q) as %T = %#v, %v; the codec refuses it (%v): want ErrCodec", res, zero, v, err, werr)
		case werr == nil && (err != nil || !reflect.DeepEqual(v, want)):
			t.Fatalf("decode(%q) as %T = %#v, %v; want %#v", res, zero, v, err, want)
		}
	case res[0] == 'p':
		if !errors.Is(err, ErrPanicked) || !strings.Contains(err.Error(), res[1:]) {
			t.Fatalf("decode(%q) as %T = %#v, %v; want ErrPanicked with the message", res, zero, v, err)
		}
	case res[0] == 'e':
		if !errors.Is(err, ErrLeaderFailed) || !strings.Contains(err.Error(), res[1:]) {
			t.Fatalf("decode(%q) as %T = %#v, %v; want ErrLeaderFailed with the message", res, zero, v, err)
		}
	case res[0] == 'g':
		if !errors.Is(err, ErrGoexit) {
			t.Fatalf("decode(%q) as %T = %#v, %v; want ErrGoexit", res, zero, v, err)
		}
	default:
		if !errors.Is(err, ErrLeaderFailed) && !errors.Is(err, ErrCodec) {
			t.Fatalf("decode(%q) as %T = %#v, %v; want an error matching ErrLeaderFailed or ErrCodec", res, zero, v, err)
		}
	}
}

// FuzzCodecs feeds the codecs any bytes (a 'v' payload from Redis) and any value to encode.
//
// Property: no codec panics. Bytes and String decode every payload, to exactly its bytes, and
// encode a value to exactly its bytes (what a waiter gets is what the leader returned). JSON
// either refuses a payload or decodes it to a value that encodes, and that encoding decodes to
// the same encoding again (a value shared once is shared unchanged by the next leader); a value
// it encodes decodes without error. OnceValues' pair codec does the same, and refuses every
// payload that is not a JSON array of two values its element types decode.
func FuzzCodecs(f *testing.F) {
	for _, seed := range []string{"", "42", "-0", "1e400", "1e-400", "null", "\"\\ud800\"", "\"\xff\"", "{}", "[]",
		"{\"id\":1,\"name\":\"n\",\"tags\":[\"a\"],\"attrs\":{\"x\":[1,{\"y\":null}]}}", "{\"next\":{\"next\":null}}",
		"9007199254740993", "123456789012345678901234567890", " 1 ", "[1,2", "\x00"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := Bytes().Decode(bytes.Clone(b)); err != nil || !bytes.Equal(v, b) {
			t.Fatalf("Bytes().Decode(%q) = %q, %v", b, v, err)
		}
		if e, err := Bytes().Encode(bytes.Clone(b)); err != nil || !bytes.Equal(e, b) {
			t.Fatalf("Bytes().Encode(%q) = %q, %v", b, e, err)
		}
		if v, err := String().Decode(b); err != nil || v != string(b) {
			t.Fatalf("String().Decode(%q) = %q, %v", b, v, err)
		}
		if e, err := String().Encode(string(b)); err != nil || string(e) != string(b) {
			t.Fatalf("String().Encode(%q) = %q, %v", b, e, err)
		}
		checkJSON[int](t, b)
		checkJSON[float64](t, b)
		checkJSON[string](t, b)
		checkJSON[[]string](t, b)
		checkJSON[map[string]any](t, b)
		checkJSON[any](t, b)
		checkJSON[*fuzzStruct](t, b)
		checkJSON[fuzzStruct](t, b)
		checkPair[int, string](t, b)
		checkPair[any, []string](t, b)
		checkPair[*fuzzStruct, []byte](t, b)
		// A value made from the payload encodes and decodes back.
		s := string(b)
		c := JSON[fuzzStruct]()
		in := fuzzStruct{ID: len(b), Name: strings.ToValidUTF8(s, "\uFFFD"), Tags: []string{strconv.Quote(s)}, Raw: map[string]string{"k": strings.ToValidUTF8(s, "?")}}
		enc, err := c.Encode(in)
		if err != nil {
			t.Fatalf("JSON encode %#v: %v", in, err)
		}
		out, err := c.Decode(enc)
		if err != nil || !reflect.DeepEqual(out, in) {
			t.Fatalf("JSON round trip of %#v: %#v, %v", in, out, err)
		}
		pc := pairCodec[fuzzStruct, []byte]{}
		pin := pair[fuzzStruct, []byte]{in, bytes.Clone(b)}
		penc, err := pc.Encode(pin)
		if err != nil {
			t.Fatalf("pair encode %#v: %v", pin, err)
		}
		pout, err := pc.Decode(penc)
		if err != nil || !reflect.DeepEqual(pout, pin) {
			t.Fatalf("pair round trip of %#v: %#v, %v", pin, pout, err)
		}
	})
}

func checkPair[T1, T2 any](t *testing.T, b []byte) {
	t.Helper()
	c := pairCodec[T1, T2]{}
	v, err := c.Decode(b)
	var raw []json.RawMessage
	if json.Unmarshal(b, &raw) != nil || len(raw) != 2 {
		if err == nil {
			t.Fatalf("pair[%T, %T]: %q, not a JSON array of two, decodes to %#v", v.v1, v.v2, b, v)
		}
		return
	}
	if err != nil {
		if !reflect.DeepEqual(v, pair[T1, T2]{}) {
			t.Fatalf("pair[%T, %T]: %q: error %v with value %#v", v.v1, v.v2, b, err, v)
		}
		return
	}
	enc, err := c.Encode(v)
	if err != nil {
		t.Fatalf("pair[%T, %T]: %q decodes to %#v, which does not encode: %v", v.v1, v.v2, b, v, err)
	}
	// As for checkJSON: the encoding must not change when decoded and encoded again.
	again, err := c.Decode(enc)
	if err != nil {
		t.Fatalf("pair[%T, %T]: %q decodes to %#v, encoded %q, which does not decode: %v", v.v1, v.v2, b, v, enc, err)
	}
	enc2, err := c.Encode(again)
	if err != nil || !bytes.Equal(enc2, enc) {
		t.Fatalf("pair[%T, %T]: %q decodes to %#v, encoded %q, which decodes to %#v, encoded %q, %v", v.v1, v.v2, b, v, enc, again, enc2, err)
	}
}

func checkJSON[T any](t *testing.T, b []byte) {
	t.Helper()
	c := JSON[T]()
	v, err := c.Decode(b)
	if err != nil {
		return
	}
	enc, err := c.Encode(v)
	if err != nil {
		t.Fatalf("JSON[%T]: %q decodes to %#v, which does not encode: %v", v, b, v, err)
	}
	// The encoding is what is shared: decoded and encoded again, it must not change. (The values
	// may differ where JSON cannot tell them apart: an empty slice that omitempty drops decodes
	// as nil.)
	again, err := c.Decode(enc)
	if err != nil {
		t.Fatalf("JSON[%T]: %q decodes to %#v, encoded %q, which does not decode: %v", v, b, v, enc, err)
	}
	enc2, err := c.Encode(again)
	if err != nil || !bytes.Equal(enc2, enc) {
		t.Fatalf("JSON[%T]: %q decodes to %#v, encoded %q, which decodes to %#v, encoded %q, %v", v, b, v, enc, again, enc2, err)
	}
}

// FuzzGroupKeys checks how a Group names the Redis keys of one of its keys: the group name
// and the key are joined with a length prefix, then escaped (internal/keys).
//
// Property: for any group names and keys, the keys of one (group, key) pair (lead, kept, every
// res:<owner>, fence, forgot, the channel) share one hash slot, and two different pairs never share a key:
// "a:b"+"c" is not "a"+"b:c".
func FuzzGroupKeys(f *testing.F) {
	f.Add("a:b", "c", "a", "b:c")
	f.Add("1:a", "", "1", "a:")
	f.Add("{", "}", "}", "{")
	f.Add("g", "%7B", "g", "{")
	f.Add("", "x", "x", "")
	f.Add("\xff\x00", "k", "\xff", "\x00:k")
	h := &core.Handle{Config: core.Config{Prefix: "distsync:"}}
	f.Fuzz(func(t *testing.T, g1, k1, g2, k2 string) {
		a, erra := (&Group[int]{c: h, name: g1}).keys(k1)
		b, errb := (&Group[int]{c: h, name: g2}).keys(k2)
		if erra != nil || errb != nil {
			// Group names are checked by NewGroup; the encoded name is never empty.
			t.Fatalf("keys(%q, %q): %v; keys(%q, %q): %v", g1, k1, erra, g2, k2, errb)
		}
		for _, ks := range []keyset{a, b} {
			want := keys.Slot(ks.lead)
			for _, k := range []string{ks.kept, ks.resPrefix, ks.resPrefix + "AAECAwQFBgcICQoL:1", ks.fence, ks.forgot, ks.channel} {
				if got := keys.Slot(k); got != want {
					t.Fatalf("%q in slot %d, %q in slot %d", ks.lead, want, k, got)
				}
			}
		}
		same := g1 == g2 && k1 == k2
		if (a == b) != same || (a.lead == b.lead) != same || (a.channel == b.channel) != same || (a.kept == b.kept) != same ||
			(a.fence == b.fence) != same || (a.forgot == b.forgot) != same {
			t.Fatalf("group %q key %q: %+v; group %q key %q: %+v", g1, k1, a, g2, k2, b)
		}
	})
}
