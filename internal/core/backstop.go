package core

import (
	"fmt"
	"strconv"
	"time"
)

// Backstop is how long a waiter may wait without a message before it checks again: until
// the claim it waits behind would lapse (left, as Redis reported it), plus slack, since a
// claim that lapses publishes nothing. The slack keeps an idle waiter to one command per lease
// against a holder that renews (its lease never drops below 2/3 of ttl, so left + ttl/3 >=
// ttl), and shrinks for a claim about to lapse anyway (a fixed lease, a crashed holder), so
// that the waiter is there soon after it does.
func Backstop(left time.Duration, ttl time.Duration) time.Duration {
	return left + min(ttl/RenewDivisor, left/2) + time.Millisecond
}

// Ms formats d as whole milliseconds, for script arguments.
func Ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// Unexpected is the error of a script reply that does not have the expected shape: Permanent,
// since a retry would get the same.
func Unexpected(script fmt.Stringer, reply any) error {
	return Permanent(fmt.Errorf("unexpected reply %v from %s", reply, script))
}
