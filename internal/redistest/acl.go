package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// ACL users: tests that run as a Redis user whose permissions are limited, as a deployment's
// would be (docs/acl.md).

// EachServer runs f as a subtest on the real backends, a redis-server and a Cluster, in
// parallel as [Each] does, for what miniredis does not have (ACLs).
func EachServer(t *testing.T, f func(t *testing.T, b *Backend)) {
	t.Helper()
	each(t, []string{Standalone, ClusterB}, f)
}

// User is a Redis ACL user that [CreateUser] made on some servers for one test.
type User struct {
	Name, Password string
	admins         []rueidis.Client
}

// CreateUser makes an ACL user with a name and password of its own on every server admins
// reach (ACLs are per server: a Cluster's nodes and a primary's replicas each need the user),
// with ACL SETUSER <name> reset on ><password> followed by rules, and deletes it when tb ends.
// The rules must not turn the user off or set its password.
func CreateUser(tb testing.TB, admins []rueidis.Client, rules ...string) *User {
	tb.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	u := &User{Name: "distsync-test-" + hex.EncodeToString(b[:4]), Password: hex.EncodeToString(b[4:]), admins: admins}
	tb.Cleanup(func() {
		for _, c := range admins {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = c.Do(ctx, c.B().AclDeluser().Username(u.Name).Build()).Error()
			cancel()
		}
	})
	u.Set(tb, append([]string{"reset", "on", ">" + u.Password}, rules...)...)
	return u
}

// Set runs ACL SETUSER with rules for u on every server, adding to what u has. Rules that
// name a command the server binary's version does not know are left out, as docs/acl.md tells
// a user of that version to do: sharded pub/sub (SSUBSCRIBE, SUNSUBSCRIBE, SPUBLISH) before
// Redis 7.0, whose ACL SETUSER refuses the names.
func (u *User) Set(tb testing.TB, rules ...string) {
	tb.Helper()
	rules = knownRules(tb, rules)
	for _, c := range u.admins {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.Do(ctx, c.B().Arbitrary("ACL", "SETUSER").Args(append([]string{u.Name}, rules...)...).Build()).Error()
		cancel()
		if err != nil {
			tb.Fatalf("ACL SETUSER %s %s: %v", u.Name, strings.Join(rules, " "), err)
		}
	}
}

// Option returns opt with u's credentials.
func (u *User) Option(opt rueidis.ClientOption) rueidis.ClientOption {
	opt.Username, opt.Password = u.Name, u.Password
	return opt
}

// Client returns a new client with opt as u, closed when tb ends.
func (u *User) Client(tb testing.TB, opt rueidis.ClientOption) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(u.Option(opt))
	if err != nil {
		tb.Fatalf("rueidis.NewClient as %s: %v", u.Name, err)
	}
	tb.Cleanup(c.Close)
	return c
}

// Denial is one entry of ACL LOG: a command, key or channel the server refused to a user.
type Denial struct {
	Reason  string // "command", "key", "channel", "auth"
	Context string // "toplevel", "lua", "multi"
	Object  string // the command (as "client|tracking"), key or channel refused
	Count   int64  // how many times (Redis counts repeats of an entry within a minute in one)
}

func (d Denial) String() string { return d.Reason + " " + d.Object + " (" + d.Context + ")" }

// SetInfo reports whether d is the refusal of the CLIENT SETINFO that rueidis sends at
// connect (and whose refusal it ignores), which docs/acl.md's lines leave out because older
// servers refuse its name in ACL SETUSER: "client|setinfo" from Redis 7.0 on; before 7.0,
// which does not know the subcommand, the server logs the command alone, "client" (the doc's
// other CLIENT subcommand, TRACKING, refused, fails NewClient: a client that works was not
// refused it).
func (d Denial) SetInfo(tb testing.TB) bool {
	if d.Object == "client|setinfo" {
		return true
	}
	v, err := ServerVersion()
	return err == nil && !v.AtLeast(7, 0) && d.Object == "client" && d.Context == "toplevel"
}

// knownRules returns rules without those the server binary's version does not know (see
// User.Set).
func knownRules(tb testing.TB, rules []string) []string {
	v, err := ServerVersion()
	if err != nil || v.AtLeast(7, 0) {
		return rules
	}
	var out []string
	for _, r := range rules {
		switch strings.TrimLeft(r, "+-") {
		case "ssubscribe", "sunsubscribe", "spublish":
			continue
		}
		out = append(out, r)
	}
	return out
}

// Denials returns what the servers refused to u, as ACL LOG has it on each (the last 128
// entries per server, Redis's default acllog-max-len).
func (u *User) Denials(tb testing.TB) []Denial {
	tb.Helper()
	var out []Denial
	for _, c := range u.admins {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		entries, err := c.Do(ctx, c.B().Arbitrary("ACL", "LOG").Args("128").Build()).ToArray()
		cancel()
		if err != nil {
			tb.Fatalf("ACL LOG: %v", err)
		}
		for _, e := range entries {
			mm, err := e.AsMap()
			if err != nil {
				tb.Fatalf("ACL LOG entry: %v", err)
			}
			m := map[string]string{}
			for k, v := range mm {
				if n, err := v.AsInt64(); err == nil { // count, entry-id
					m[k] = strconv.FormatInt(n, 10)
				} else {
					m[k], _ = v.ToString()
				}
			}
			if m["username"] == u.Name {
				n, _ := strconv.ParseInt(m["count"], 10, 64)
				out = append(out, Denial{Reason: m["reason"], Context: m["context"], Object: m["object"], Count: n})
			}
		}
	}
	return out
}

// ACLDoc is the file, relative to the module's root, whose ACL SETUSER lines tests run as
// users: the doc a user copies them from is the one tested.
const ACLDoc = "docs/acl.md"

// ACLRules returns the rules of the ACL SETUSER line that follows the marker
// "<!-- acl:<name> -->" in [ACLDoc], the user name and the first rules that set the user up
// ("reset", "on", a password ">...") left out, with the default key prefix ("distsync:") of
// its key and channel patterns replaced by prefix (with its glob characters escaped).
func ACLRules(tb testing.TB, name, prefix string) []string {
	tb.Helper()
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", filepath.FromSlash(ACLDoc))
	doc, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	rules, err := aclRules(string(doc), name)
	if err != nil {
		tb.Fatalf("redistest: %s: %v", ACLDoc, err)
	}
	var out []string
	for _, r := range rules {
		switch {
		case r == "reset" || r == "on" || strings.HasPrefix(r, ">"):
			continue
		case r == "~distsync:*" || r == "&distsync:*":
			r = r[:1] + escapeGlob(prefix) + "*"
		case strings.Contains(r, "distsync:"):
			tb.Fatalf("redistest: %s, line %s: the prefix in %q is not a whole pattern ~distsync:* or &distsync:*", ACLDoc, name, r)
		}
		out = append(out, r)
	}
	return out
}

// aclRules returns the words after "ACL SETUSER <user>" on the first line starting with
// "ACL SETUSER" after the marker of name.
func aclRules(doc, name string) ([]string, error) {
	marker := "<!-- acl:" + name + " -->"
	i := strings.Index(doc, marker)
	if i < 0 {
		return nil, fmt.Errorf("no marker %s", marker)
	}
	for _, line := range strings.Split(doc[i+len(marker):], "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "ACL" && f[1] == "SETUSER" {
			return f[3:], nil
		}
	}
	return nil, fmt.Errorf("no ACL SETUSER line after %s", marker)
}
