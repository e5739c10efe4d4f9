// Command apicheck reads gorelease's report (stdin) of the API changes since the last release
// and fails unless CHANGELOG.md's "Unreleased" section names each changed identifier: every
// exported API change is told to the users who pin a version.
//
//	gorelease -base=v0.1.0 | go run ./.ci/apicheck CHANGELOG.md
//
// A change is a line "<identifier>: <what>" under a "## ... changes" heading of a package's
// report; it counts as listed when every name in its identifier ((*Handle).Identity: Handle and
// Identity) appears in the Unreleased section, and, for a package other than the root, so does
// the package's name (inspect.Keys).
package main

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"regexp"
	"strings"
)

const root = "github.com/distsync/distsync"

var ident = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gorelease ... | apicheck CHANGELOG.md")
		os.Exit(2)
	}
	b, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(2)
	}
	unreleased := section(string(b), "## Unreleased")
	words := map[string]bool{}
	for _, w := range ident.FindAllString(unreleased, -1) {
		words[w] = true
	}
	var missing []string
	pkg, inChanges, changes := "", false, 0
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		line := sc.Text()
		fmt.Println(line) // the report, as CI's log shows it
		switch {
		case strings.HasPrefix(line, "# "):
			pkg, inChanges = strings.TrimPrefix(line, "# "), false
		case strings.HasPrefix(line, "## "):
			inChanges = strings.HasSuffix(line, "changes")
		case inChanges && strings.Contains(line, ": "):
			changes++
			subject, _, _ := strings.Cut(line, ": ")
			need := ident.FindAllString(subject, -1)
			if pkg != root && pkg != "summary" {
				need = append(need, path.Base(pkg))
			}
			for _, w := range need {
				if !words[w] {
					missing = append(missing, fmt.Sprintf("%s: %s (no %q in Unreleased)", pkg, line, w))
					break
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(2)
	}
	if len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "apicheck: %d of %d API changes since the last release are not in CHANGELOG.md's Unreleased section:\n", len(missing), changes)
		for _, m := range missing {
			fmt.Fprintln(os.Stderr, "  "+m)
		}
		os.Exit(1)
	}
	fmt.Printf("apicheck: every one of the %d API changes since the last release is in CHANGELOG.md's Unreleased section\n", changes)
}

// section returns the text from the line that starts with heading to the next "## " line.
func section(s, heading string) string {
	i := strings.Index(s, "\n"+heading)
	if i < 0 {
		return ""
	}
	rest := s[i+1:]
	if j := strings.Index(rest[len(heading):], "\n## "); j >= 0 {
		return rest[:len(heading)+j]
	}
	return rest
}
