package once

import (
	"encoding/json"
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
