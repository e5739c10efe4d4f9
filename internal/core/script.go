package core

import (
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// Ms formats d as whole milliseconds, for script arguments.
func Ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// Unexpected is the error of a script reply that does not have the expected shape: Permanent,
// since a retry would get the same.
func Unexpected(script fmt.Stringer, reply any) error {
	return Permanent(fmt.Errorf("unexpected reply %v from %s", reply, script))
}

// Ints reads an array reply of integers into buf, as rueidis's AsIntSlice does (a nil element
// reads as 0, a string as its number), without making a slice: a caller passes a buffer on
// its stack, and the hot paths' replies (an acquire script's) allocate nothing but rueidis's
// own array.
func Ints(r rueidis.RedisResult, buf []int64) ([]int64, error) {
	arr, err := r.ToArray()
	if err != nil {
		return nil, err
	}
	for i := range arr {
		m := &arr[i]
		if m.IsNil() {
			buf = append(buf, 0)
			continue
		}
		n, err := m.AsInt64()
		if err != nil {
			return nil, err
		}
		buf = append(buf, n)
	}
	return buf, nil
}
