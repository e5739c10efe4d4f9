package embedded_test

import (
	"testing"

	"github.com/distsync/distsync/internal/testrun"
)

func TestMain(m *testing.M) {
	testrun.Main(m, func() string { return "ran its example on the embedded miniredis" })
}
