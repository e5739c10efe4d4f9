package core

import (
	"fmt"
	"strconv"
	"time"
)

// Ms formats d as whole milliseconds, for script arguments.
func Ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// Unexpected is the error of a script reply that does not have the expected shape: Permanent,
// since a retry would get the same.
func Unexpected(script fmt.Stringer, reply any) error {
	return Permanent(fmt.Errorf("unexpected reply %v from %s", reply, script))
}
