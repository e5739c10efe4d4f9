package core

import "testing"

// INFO server is read for the name and version a user knows (Valkey's own) and the Redis
// version the server is compatible with, which is what the minimum is checked against.
func TestParseInfo(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		info                  string
		name, version, compat string
	}{
		{"# Server\r\nredis_version:6.2.16\r\nredis_mode:cluster\r\n", "Redis", "6.2.16", "6.2.16"},
		{"# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n", "Valkey", "8.0.1", "7.2.4"},
		{"# Clients\nconnected_clients:1\r\n", "", "", ""}, // miniredis' INFO: no version
	} {
		s := ParseInfo(c.info)
		if s.Name != c.name || s.Version != c.version || s.Compat != c.compat {
			t.Errorf("ParseInfo(%q) = %q %q %q, want %q %q %q", c.info, s.Name, s.Version, s.Compat, c.name, c.version, c.compat)
		}
	}
}

func TestAtLeast(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v, want string
		ok      bool
	}{
		{"6.2.16", "6.2", true}, {"6.2.0", "6.2", true}, {"6.0.20", "6.2", false}, {"7.0.0", "7.0", true},
		{"6.2.16", "7.0", false}, {"10.0.0", "7.0", true}, {"7.4.1", "7.4.2", false}, {"8.0", "8.0.0", true},
	} {
		if got := AtLeast(c.v, c.want); got != c.ok {
			t.Errorf("AtLeast(%q, %q) = %v, want %v", c.v, c.want, got, c.ok)
		}
	}
}
