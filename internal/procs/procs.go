// Package procs sizes the Go runtime for a process that runs an agent.
package procs

import (
	"os"
	"runtime"
	"sync"
)

var (
	mu  sync.Mutex
	own = runtime.GOMAXPROCS(0) // the runtime's own choice
)

// Set gives the runtime two more Ps than it chose itself (at least four),
// unless GOMAXPROCS is set in the environment. An agent spends much of its
// time in system calls that block: FUSE requests read from /dev/fuse,
// blocks written to the cache with O_DIRECT. A thread blocked in one holds
// its P until the runtime takes it back, and goroutines that could run
// meanwhile (decrypting the next block) wait; with spare Ps they run at
// once. On two cores, a cold read of 1 GiB through the mount on loopback
// went from about 1.06 to 1.2-1.28 GB/s (go test -bench
// '^BenchmarkColdRead$' ./internal/mount), while the client library's own
// reads, which block on nothing but the network poller, were 6-8% slower
// with the extra Ps; so only processes that run an agent get them
// (agent.Start). Four more Ps were no better than two.
func Set() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	runtime.GOMAXPROCS(max(own+2, 4))
}

// Own puts back the runtime's own choice until the returned function is
// called, which restores what was set before: for benchmarks that measure
// a reference in the same process as an agent.
func Own() (restore func()) {
	mu.Lock()
	defer mu.Unlock()
	was := runtime.GOMAXPROCS(own)
	return func() {
		mu.Lock()
		defer mu.Unlock()
		runtime.GOMAXPROCS(was)
	}
}
