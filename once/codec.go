package once

import (
	"encoding/json"
	"fmt"
)

// Codec turns a Group's results into bytes for Redis and back.
type Codec[T any] interface {
	Encode(v T) ([]byte, error)
	Decode(b []byte) (T, error)
}

// JSON returns the codec that encodes with encoding/json: the default for every result type
// except []byte and string.
func JSON[T any]() Codec[T] { return jsonCodec[T]{} }

type jsonCodec[T any] struct{}

func (jsonCodec[T]) Encode(v T) ([]byte, error) { return json.Marshal(v) }

func (jsonCodec[T]) Decode(b []byte) (T, error) {
	var v T
	err := json.Unmarshal(b, &v)
	return v, err
}

// Bytes returns the codec of []byte results: the bytes themselves. It is the default for a
// Group[[]byte].
func Bytes() Codec[[]byte] { return bytesCodec{} }

type bytesCodec struct{}

func (bytesCodec) Encode(v []byte) ([]byte, error) { return v, nil }
func (bytesCodec) Decode(b []byte) ([]byte, error) { return b, nil }

// String returns the codec of string results: the string's bytes. It is the default for a
// Group[string].
func String() Codec[string] { return stringCodec{} }

type stringCodec struct{}

func (stringCodec) Encode(v string) ([]byte, error) { return []byte(v), nil }
func (stringCodec) Decode(b []byte) (string, error) { return string(b), nil }

// defaultCodec returns the codec a Group[T] uses unless told otherwise.
func defaultCodec[T any]() Codec[T] {
	var zero T
	switch any(zero).(type) {
	case []byte:
		return any(Bytes()).(Codec[T])
	case string:
		return any(String()).(Codec[T])
	}
	return JSON[T]()
}

// pair is the result of a [OnceValues].
type pair[T1, T2 any] struct {
	v1 T1
	v2 T2
}

// pairCodec encodes a pair as a JSON array of its two values, each encoded as [JSON] does.
type pairCodec[T1, T2 any] struct{}

func (pairCodec[T1, T2]) Encode(p pair[T1, T2]) ([]byte, error) {
	b1, err := JSON[T1]().Encode(p.v1)
	if err != nil {
		return nil, err
	}
	b2, err := JSON[T2]().Encode(p.v2)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(b1)+len(b2)+3)
	b = append(append(append(append(append(b, '['), b1...), ','), b2...), ']')
	return b, nil
}

func (pairCodec[T1, T2]) Decode(b []byte) (pair[T1, T2], error) {
	var zero pair[T1, T2]
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return zero, err
	}
	if len(raw) != 2 {
		return zero, fmt.Errorf("a pair is a JSON array of two values, got %d", len(raw))
	}
	v1, err := JSON[T1]().Decode(raw[0])
	if err != nil {
		return zero, err
	}
	v2, err := JSON[T2]().Decode(raw[1])
	if err != nil {
		return zero, err
	}
	return pair[T1, T2]{v1, v2}, nil
}
