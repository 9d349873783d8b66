// Package fault stops a process at a named point of a protocol, so that
// tests can check what survives a crash exactly there (a share killed in
// the middle of a recall, an agent killed half way through a write-back).
//
// Points are armed by the environment variable PANDO_FAULT, a
// comma-separated list of NAME or NAME@N (crash at the Nth time the point
// is reached; the first when N is missing). Unarmed points cost one map
// lookup on a nil map.
package fault

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Env is the variable that arms points.
const Env = "PANDO_FAULT"

var (
	mu     sync.Mutex
	armed  = parse(os.Getenv(Env))
	counts map[string]int
)

func parse(s string) map[string]int {
	if s == "" {
		return nil
	}
	m := make(map[string]int)
	for _, f := range strings.Split(s, ",") {
		name, n, ok := strings.Cut(strings.TrimSpace(f), "@")
		if name == "" {
			continue
		}
		at := 1
		if ok {
			if v, err := strconv.Atoi(n); err == nil && v > 0 {
				at = v
			}
		}
		m[name] = at
	}
	return m
}

// Crash kills the process at once, as a power cut or kill -9 would (no
// deferred functions, no flushing), if point name is armed and reached for
// the armed time.
func Crash(name string) {
	if armed == nil {
		return
	}
	at, ok := armed[name]
	if !ok {
		return
	}
	mu.Lock()
	if counts == nil {
		counts = make(map[string]int)
	}
	counts[name]++
	n := counts[name]
	mu.Unlock()
	if n != at {
		return
	}
	fmt.Fprintf(os.Stderr, "fault: crashing at %s\n", name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// Armed reports whether any point is armed (for logging at start).
func Armed() bool { return len(armed) > 0 }
