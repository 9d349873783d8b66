package mount_test

import (
	"os"
	"testing"

	"pando.dev/pando/internal/procs"
)

// TestMain sizes the runtime as the pando binary does, so that the
// benchmarks (agent, share and references in this one process) run as
// pando would.
func TestMain(m *testing.M) {
	procs.Set()
	os.Exit(m.Run())
}
