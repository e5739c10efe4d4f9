// Command seamgen writes seam_gen.go in the current directory, package scripts's (see package
// seamgen): go generate runs it there.
package main

import (
	"fmt"
	"os"

	"github.com/distsync/distsync/internal/scripts/seamgen"
)

func main() {
	out, err := seamgen.Generate(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "seamgen:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(seamgen.Output, out, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "seamgen:", err)
		os.Exit(1)
	}
}
