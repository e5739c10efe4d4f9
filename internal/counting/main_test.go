package counting_test

import (
	"testing"

	"github.com/distsync/distsync/internal/testrun"
)

func TestMain(m *testing.M) {
	testrun.Main(m, func() string { return "unit tests, on the embedded miniredis" })
}
