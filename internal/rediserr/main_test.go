package rediserr_test

import (
	"testing"

	"github.com/distsync/distsync/internal/testrun"
)

func TestMain(m *testing.M) {
	testrun.Main(m, func() string { return "ran on the embedded miniredis only (it needs no other)" })
}
