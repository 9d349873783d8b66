package remote

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// PathEstimate measures the path to a share from bulk requests (a file's
// reads or writes): the shortest time a request took (the round trip, plus
// a block's serialisation and the share's disk) and the highest delivery
// rate, each request's sample being the bytes delivered while it was under
// way over its time (as TCP BBR measures a path). Their product is the
// path's bandwidth-delay product. It is safe for concurrent use.
type PathEstimate struct {
	delivered atomic.Int64 // bytes moved so far

	mu      sync.Mutex
	minTime time.Duration
	maxRate float64 // bytes per second
}

// Delivered is the number of bytes the requests sampled so far moved.
func (e *PathEstimate) Delivered() int64 { return e.delivered.Load() }

// Sample records a request that moved n bytes in d, begun when Delivered
// returned d0.
func (e *PathEstimate) Sample(d time.Duration, d0, n int64) {
	now := e.delivered.Add(n)
	if d <= 0 || n == 0 {
		return
	}
	e.mu.Lock()
	if e.minTime == 0 || d < e.minTime {
		e.minTime = d
	}
	e.maxRate = max(e.maxRate, float64(now-d0)/d.Seconds())
	e.mu.Unlock()
}

// Depth is how many requests of bs bytes to keep in flight: twice the
// measured bandwidth-delay product (so that a window that limits the rate
// it measures grows, as the rate samples then grow with it), at least lo
// and at most hi.
func (e *PathEstimate) Depth(bs int64, lo, hi int) int {
	if hi <= lo {
		return lo
	}
	e.mu.Lock()
	bdp := e.maxRate * e.minTime.Seconds()
	e.mu.Unlock()
	return min(max(int(math.Ceil(2*bdp/float64(bs))), lo), hi)
}
