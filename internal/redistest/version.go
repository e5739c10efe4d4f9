package redistest

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Version is the version of a server binary, as its --version prints it ("v=6.2.16").
type Version struct {
	Major, Minor, Patch int
}

// AtLeast reports whether v is major.minor or later.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

var (
	versionsMu sync.Mutex
	versions   = map[string]Version{} // by binary path
	versionRe  = regexp.MustCompile(`\bv=(\d+)\.(\d+)\.(\d+)`)
)

// ServerVersion returns the version of the server binary ([ServerBin]), learned once per
// binary from its --version ("Redis server v=6.2.16 ...", "Valkey server v=8.0.1 ...").
// The harness writes only the configuration that version takes.
func ServerVersion() (Version, error) {
	bin, err := ServerBin()
	if err != nil {
		return Version{}, err
	}
	return binVersion(bin)
}

func binVersion(bin string) (Version, error) {
	versionsMu.Lock()
	defer versionsMu.Unlock()
	if v, ok := versions[bin]; ok {
		return v, nil
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return Version{}, fmt.Errorf("%s --version: %w", bin, err)
	}
	m := versionRe.FindStringSubmatch(string(out))
	if m == nil {
		return Version{}, fmt.Errorf("%s --version: no version in %q", bin, strings.TrimSpace(string(out)))
	}
	var v Version
	v.Major, _ = strconv.Atoi(m[1])
	v.Minor, _ = strconv.Atoi(m[2])
	v.Patch, _ = strconv.Atoi(m[3])
	versions[bin] = v
	return v, nil
}

// serverConfig returns the configuration lines every server of the harness gets, for a
// binary of version v: what Redis 6.2 refuses (it stops at start on an unknown directive) is
// left out there, where it is not needed either.
//
//   - enable-debug-command local (7.0+): DEBUG SLEEP and DEBUG JMAP for fault tests; before
//     7.0 DEBUG is allowed to every client, and the directive does not exist.
//   - cluster-port (7.0+): the bus port, set to port+10000 for all to see; before 7.0 the
//     bus port is always port+10000, which freePort keeps free and below the ephemeral range
//     too.
func serverConfig(v Version, port int, cluster bool) []string {
	var conf []string
	if v.AtLeast(7, 0) {
		conf = append(conf, "enable-debug-command local")
	}
	if cluster && v.AtLeast(7, 0) {
		conf = append(conf, "cluster-port "+strconv.Itoa(port+10000))
	}
	return conf
}

// Sharded reports whether distsync uses sharded pub/sub on this backend: a cluster whose
// server binary has it (Redis 7.0+, Valkey). A test that publishes or counts subscribers as
// distsync does must then use SPUBLISH and SSUBSCRIBE; everywhere else, PUBLISH and SUBSCRIBE
// (a Redis 6.2 cluster broadcasts a PUBLISH to every node).
func (b *Backend) Sharded() bool {
	if b.Name != ClusterB {
		return false
	}
	v, err := ServerVersion()
	if err != nil {
		b.tb.Fatalf("redistest: %v", err)
	}
	return v.AtLeast(7, 0)
}

// Pub returns the publish command distsync's scripts use on this backend: SPUBLISH where
// [Backend.Sharded], else PUBLISH.
func (b *Backend) Pub() string {
	if b.Sharded() {
		return "SPUBLISH"
	}
	return "PUBLISH"
}
