package seamgen

import (
	"testing"

	"github.com/distsync/distsync/internal/testrun"
)

func TestMain(m *testing.M) { testrun.Main(m, nil) }
