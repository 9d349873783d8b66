package blockcache

import (
	"context"
	"testing"
)

// TestReportSum checks that a Fetcher's sum reaches the slot of the call
// it was made in, and that a report outside one is dropped.
func TestReportSum(t *testing.T) {
	ReportSum(context.Background(), 3, 7) // no slot: nothing to fill, no panic
	var s Sum
	ctx := WithSum(context.Background(), &s)
	if s.OK {
		t.Fatal("a slot is filled before anything was reported")
	}
	ReportSum(ctx, 4096, 0xdeadbeef)
	if want := (Sum{N: 4096, CRC: 0xdeadbeef, OK: true}); s != want {
		t.Fatalf("slot holds %+v, want %+v", s, want)
	}
	var other Sum
	ReportSum(WithSum(ctx, &other), 1, 2)
	if other.N != 1 || s.N != 4096 {
		t.Fatalf("a nested call filled the outer slot: inner %+v, outer %+v", other, s)
	}
}
