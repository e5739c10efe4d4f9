// Package rediserr classifies Redis's error replies for the loops that retry: which go away by
// themselves (a failover, a restart, a resharding) and which a retry would only meet again (an
// ACL refusal, an unknown command, a script's own error).
package rediserr

import (
	"errors"
	"strings"

	"github.com/redis/rueidis"
)

// As returns the Redis error reply in err's chain, if there is one: an error that distsync
// wrapped (a script's, annotated with what the script ran) still reads as Redis's.
func As(err error) (*rueidis.RedisError, bool) {
	var re *rueidis.RedisError
	if errors.As(err, &re) && re != nil {
		return re, true
	}
	return nil, false
}

// transient are the prefixes of the error replies that a failover, a restart or a cluster
// resharding produces. MOVED and ASK reach distsync only from a dedicated connection (the
// replica ack's), which does not follow them as the client does: the slot moved, nothing ran,
// and the client's map of the slots is being refreshed.
var transient = []string{"READONLY", "LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "BUSY", "MOVED", "ASK"}

// Transient reports whether re may go away by itself.
func Transient(re *rueidis.RedisError) bool {
	msg := re.Error()
	for _, prefix := range transient {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}
