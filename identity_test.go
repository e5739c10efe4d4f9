package distsync_test

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/counting"
	"github.com/distsync/distsync/internal/redistest"
	"github.com/distsync/distsync/mutex"
)

// An identity that is empty or longer than MaxIdentityLen is refused, by New, with an error
// matching ErrInvalid that says what is wrong, and nothing is sent (the one INFO is the
// valid New's); one of MaxIdentityLen
// bytes is taken. It is a Handle's option only.
func TestWithIdentityIsValidated(t *testing.T) {
	b := redistest.Open(t, redistest.Standalone)
	c := counting.New(b.Client(t))
	for identity, want := range map[string]string{
		"": "identity must not be empty",
		strings.Repeat("x", distsync.MaxIdentityLen+1): "at most 64 bytes, got 65",
	} {
		h, err := distsync.New(c, distsync.WithIdentity(identity))
		if !errors.Is(err, distsync.ErrInvalid) || h != nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New(WithIdentity(%q)) = %v, %v; want ErrInvalid saying %q", identity, h, err, want)
		}
	}
	long := strings.Repeat("\u00e9", distsync.MaxIdentityLen/2) // 64 bytes, 32 runes
	h := redistest.Handle(t, c, distsync.WithIdentity(long))
	if h.Identity() != long {
		t.Errorf("Identity() = %q, want %q", h.Identity(), long)
	}
	if _, err := mutex.New(h, "x", distsync.WithIdentity("y")); !errors.Is(err, distsync.ErrInvalid) ||
		!strings.Contains(err.Error(), "WithIdentity does not apply") {
		t.Errorf("mutex.New(WithIdentity) = %v, want ErrInvalid: it applies to New only", err)
	}
	// The one command: the valid New's version check.
	if n := c.Total(); n != 1 || c.Counts()["INFO"] != 1 {
		t.Errorf("%d commands sent (%v), want New's one INFO", n, c.Counts())
	}
}

// By default a Handle is named by its host and process: "<host name>:<pid>". The last of two
// identities given wins.
func TestDefaultIdentityIsHostAndPID(t *testing.T) {
	t.Parallel()
	b := redistest.Open(t, redistest.Standalone)
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	want := host + ":" + strconv.Itoa(os.Getpid())
	if got := b.Pod(t, b.Prefix(t)).H.Identity(); got != want {
		t.Errorf("default Identity() = %q, want %q", got, want)
	}
	if got := b.Pod(t, b.Prefix(t), distsync.WithIdentity("a"), distsync.WithIdentity("b")).H.Identity(); got != "b" {
		t.Errorf("Identity() = %q after WithIdentity a then b, want b", got)
	}
}
