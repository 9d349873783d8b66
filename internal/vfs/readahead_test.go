package vfs

import (
	"testing"
	"time"
)

// TestReadAheadDepthFollowsThePath: read-ahead keeps its floor until the
// fetches say the path holds more, then twice the measured
// bandwidth-delay product, within its bounds; a fixed depth stays fixed.
func TestReadAheadDepthFollowsThePath(t *testing.T) {
	const bs = 1 << 20
	var e pathEstimate
	if d := e.depth(bs, 16, 64); d != 16 {
		t.Fatalf("depth %d before any fetch, want the floor 16", d)
	}
	// 100 ms round trip, 100 MB/s: 10 MB in flight, twice that asked for.
	e.sample(100*time.Millisecond, 0, 10e6)
	if d, want := e.depth(bs, 16, 64), 20; d != want {
		t.Errorf("depth %d at 100 ms and 100 MB/s, want %d", d, want)
	}
	if d := e.depth(bs, 16, 16); d != 16 {
		t.Errorf("depth %d with a fixed depth of 16", d)
	}
	// A faster sample and a shorter fetch: the highest rate, the shortest time.
	e.sample(50*time.Millisecond, e.delivered.Load(), 10e6) // 200 MB/s
	if d, want := e.depth(bs, 16, 64), 20; d != want {
		t.Errorf("depth %d at 50 ms and 200 MB/s, want %d", d, want)
	}
	e.sample(time.Second, 0, 1e9) // a rate far beyond: capped
	if d := e.depth(bs, 16, 64); d != 64 {
		t.Errorf("depth %d, want the cap 64", d)
	}
}
