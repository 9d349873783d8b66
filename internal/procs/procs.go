// Package procs sizes the Go runtime for pando's roles.
package procs

import (
	"os"
	"runtime"
)

// Set gives the runtime two more Ps than it has cores (at least four),
// unless GOMAXPROCS is set in the environment. The agent and the shares
// spend much of their time in system calls that block: FUSE requests read
// from /dev/fuse, blocks written to the cache with O_DIRECT, files read at
// a share. A thread blocked in one holds its P until the runtime takes it
// back, and goroutines that could run meanwhile (decrypting the next
// block) wait; with spare Ps they run at once. On two cores, a cold read of
// 1 GiB through the mount on loopback went from about 1.06 to 1.28 GB/s
// (go test -bench '^BenchmarkColdRead$' ./internal/mount).
func Set() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0)+2, 4))
}
