package scripts

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// An ACL that refuses a script something fails the script with an error that, before Redis
// 7.2, names neither the command nor the key: "ERR The user executing the script can't run
// this command or subcommand script: <sha>, on @user_script:23." Only the line does. explain
// puts the script's name and what it calls on that line before Redis's error, so that a user
// reads which permission is missing (docs/acl.md lists them all).

// userScriptLine finds the line of the script that Redis reports an error on.
var userScriptLine = regexp.MustCompile(`@user_script:(\d+)`)

// callOn finds the redis.call and redis.pcall of a line, with their first argument: a quoted
// command name, or the variable that holds the publish command (pub, A.pub, an ARGV).
var callOn = regexp.MustCompile(`redis\.p?call\(\s*(?:'([A-Za-z]+)'|"([A-Za-z]+)"|([^,)]+))`)

// aclRefusals are the parts of Redis's error replies that an ACL caused: refused at the script
// call itself (NOPERM: the EVALSHA or EVAL command, or a key the call names), or inside the
// script (Redis 7.0's wording, then 7.2's).
var aclRefusals = []string{"NOPERM", "can't run this command", "can't access at least one of the keys",
	"can't publish to the channel", "ACL failure in script"}

// explain returns r, or, if r is an ACL's refusal, r's error after what the script ran.
func (s *Script) explain(r rueidis.RedisResult, keys []string) rueidis.RedisResult {
	re, ok := rueidis.IsRedisErr(r.Error())
	if !ok {
		return r
	}
	msg := re.Error()
	acl := false
	for _, m := range aclRefusals {
		acl = acl || strings.Contains(msg, m)
	}
	if !acl {
		return r
	}
	if m := userScriptLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		if calls := s.callsOn(n); calls != "" {
			return rueidis.NewErrorResult(fmt.Errorf("%s, line %d, calling %s: %w", s.name, n, calls, re))
		}
		return rueidis.NewErrorResult(fmt.Errorf("%s, line %d: %w", s.name, n, re))
	}
	// Refused before the script ran: EVALSHA (or EVAL, after a NOSCRIPT) itself, or its keys.
	return rueidis.NewErrorResult(fmt.Errorf("EVALSHA/EVAL %s, keys %q: %w", s.name, slices.Clone(keys), re)) // a copy: keys stays the caller's (Exec)
}

// callsOn returns the commands line n of the script calls, as "ZADD" or "GET or SET" (the
// publish command a script is given as an argument reads "PUBLISH (SPUBLISH on Redis
// Cluster)"); "" if the line calls none. It splits the script each time: it runs only for a
// refusal, and keeping nothing in s keeps s from escaping in Exec, the hot path.
func (s *Script) callsOn(n int) string {
	lines := strings.Split(s.src, "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	var names []string
	for _, m := range callOn.FindAllStringSubmatch(lines[n-1], -1) {
		switch {
		case m[1] != "":
			names = append(names, strings.ToUpper(m[1]))
		case m[2] != "":
			names = append(names, strings.ToUpper(m[2]))
		default:
			names = append(names, "PUBLISH (SPUBLISH on Redis Cluster)")
		}
	}
	return strings.Join(names, " or ")
}
