package share

import (
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/wire"
)

// TestWriteDelegationReturnFails: a holder that answers a recall that it
// cannot write its data back (a full share) keeps the delegation; the
// request waiting for it fails at once with that cause, and so do later
// ones, while the share recalls it again; a successful return lets them
// through. Another session cannot report a failure for the holder, and a
// holder whose lease ran out is revoked, its failure forgotten.
func TestWriteDelegationReturnFails(t *testing.T) {
	var skew atomic.Int64
	tab := newInvTable(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
	lease := 2 * time.Second
	_, _, hs, _, _ := tab.longPoll("h", 0, 0, time.Millisecond, lease)
	tab.longPoll("r", 0, 0, time.Millisecond, lease)
	if !tab.grantWrite("h", "f", false) {
		t.Fatal("no delegation granted")
	}
	full := &wire.Error{Code: wire.CodeNoSpace, Message: "/f: full"}
	if tab.failReturn("h", "f", full) {
		t.Fatal("a failure was taken for a delegation not recalled")
	}
	var got error
	done := make(chan struct{})
	go func() { got = tab.awaitDeleg("r", "f", firstBlock, false); close(done) }()
	_, recalls, _, _, _ := tab.longPoll("h", hs, 0, time.Second, lease)
	if len(recalls) != 1 {
		t.Fatalf("recalls sent to the holder: %+v", recalls)
	}
	if tab.failReturn("r", "f", full) {
		t.Fatal("a session that does not hold the delegation reported its failure")
	}
	if doneWithin(done, 100*time.Millisecond) {
		t.Fatalf("the request went ahead on another session's failure report: %v", got)
	}
	if !tab.failReturn("h", "f", full) {
		t.Fatal("the holder's failure report was not taken")
	}
	if !doneWithin(done, time.Second) || !errors.Is(got, syscall.ENOSPC) {
		t.Fatalf("the waiting request: %v, want ENOSPC at once", got)
	}
	if !tab.delegated("f") {
		t.Fatal("the delegation was dropped with the holder's data")
	}
	if err := tab.awaitDeleg("r", "f", firstBlock, true); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a later change: %v, want ENOSPC", err)
	}
	// Recalled again, and returned this time.
	skew.Add(int64(recallResend))
	tab.longPoll("h", hs, 0, time.Millisecond, lease)
	tab.returnDeleg("h", "f", nil, true)
	if err := tab.awaitDeleg("r", "f", firstBlock, false); err != nil {
		t.Fatalf("after the return: %v", err)
	}

	// A holder that stops polling: its failure does not outlive its lease.
	if !tab.grantWrite("h", "g", false) {
		t.Fatal("no delegation granted")
	}
	go tab.awaitDeleg("r", "g", firstBlock, false)
	waitFor(t, func() bool { return tab.recalling("g") })
	if !tab.failReturn("h", "g", full) {
		t.Fatal("the holder's failure report was not taken")
	}
	skew.Add(int64(lease + leaseMargin + time.Second))
	if err := tab.awaitDeleg("r", "g", firstBlock, false); err != nil || tab.delegated("g") {
		t.Fatalf("past the holder's lease: %v (delegated %v), want the delegation revoked", err, tab.delegated("g"))
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 200 && !cond(); i++ {
		time.Sleep(5 * time.Millisecond)
	}
	if !cond() {
		t.Fatal("condition not met")
	}
}
