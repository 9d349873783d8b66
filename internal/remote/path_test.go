package remote

import (
	"testing"
	"time"
)

// TestPathEstimateDepth: the depth keeps its floor until the samples say
// the path holds more, then twice the measured bandwidth-delay product,
// within its bounds; a fixed depth stays fixed.
func TestPathEstimateDepth(t *testing.T) {
	const bs = 1 << 20
	var e PathEstimate
	if d := e.Depth(bs, 16, 64); d != 16 {
		t.Fatalf("depth %d before any sample, want the floor 16", d)
	}
	// 100 ms round trip, 100 MB/s: 10 MB in flight, twice that asked for.
	e.Sample(100*time.Millisecond, 0, 10e6)
	if d, want := e.Depth(bs, 16, 64), 20; d != want {
		t.Errorf("depth %d at 100 ms and 100 MB/s, want %d", d, want)
	}
	if d := e.Depth(bs, 16, 16); d != 16 {
		t.Errorf("depth %d with a fixed depth of 16", d)
	}
	// A faster sample and a shorter request: the highest rate, the
	// shortest time.
	e.Sample(50*time.Millisecond, e.Delivered(), 10e6) // 200 MB/s
	if d, want := e.Depth(bs, 16, 64), 20; d != want {
		t.Errorf("depth %d at 50 ms and 200 MB/s, want %d", d, want)
	}
	e.Sample(time.Second, 0, 1e9) // a rate far beyond: capped
	if d := e.Depth(bs, 16, 64); d != 64 {
		t.Errorf("depth %d, want the cap 64", d)
	}
}
