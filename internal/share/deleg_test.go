package share

import (
	"path/filepath"
	"testing"
	"time"

	"pando.dev/pando/internal/wire"
)

// done reports whether ch is closed within d.
func doneWithin(ch chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

func await(tab *invTable, id, path string, want wire.ByteRange, mutate bool) chan struct{} {
	ch := make(chan struct{})
	go func() { tab.awaitDeleg(id, path, want, mutate); close(ch) }()
	return ch
}

// TestWriteDelegationRecall: a conflicting request recalls the holder's
// write delegation over its long poll and waits; after the first return
// step, reads of bytes not pending go ahead, reads of pending bytes wait
// until the holder has written them, and changes wait for the last step.
func TestWriteDelegationRecall(t *testing.T) {
	tab := newInvTable(time.Now)
	lease := 2 * time.Second
	_, _, hs, _, _ := tab.longPoll("h", 0, 0, time.Millisecond, lease) // the holder's session
	tab.longPoll("r", 0, 0, time.Millisecond, lease)
	if !tab.grantWrite("h", "f", false) {
		t.Fatal("no delegation granted")
	}
	if tab.grantWrite("r", "f", false) {
		t.Fatal("a second agent was granted a delegation on the same file")
	}
	// The holder's own requests never wait.
	if !doneWithin(await(tab, "h", "f", firstBlock, true), time.Second) {
		t.Fatal("the holder waited for its own delegation")
	}
	stat := await(tab, "r", "f", firstBlock, false)
	_, recalls, _, _, _ := tab.longPoll("h", hs, 0, time.Second, lease)
	if len(recalls) != 1 || recalls[0].Path != "f" || recalls[0].Len != 1<<20 {
		t.Fatalf("recalls sent to the holder: %+v", recalls)
	}
	if doneWithin(stat, 100*time.Millisecond) {
		t.Fatal("a conflicting request went ahead before the delegation was returned")
	}
	// First step: the first block and the size are at the share; two
	// more blocks are pending.
	pending := []wire.ByteRange{{Off: 1 << 20, Len: 1 << 20}, {Off: 3 << 20, Len: 1 << 20}}
	tab.returnDeleg("h", "f", pending, false)
	if !doneWithin(stat, time.Second) {
		t.Fatal("a request needing no pending byte waited past the first return step")
	}
	readPending := await(tab, "r", "f", wire.ByteRange{Off: 3<<20 + 5, Len: 10}, false)
	change := await(tab, "r", "f", firstBlock, true)
	if doneWithin(readPending, 100*time.Millisecond) || doneWithin(change, 10*time.Millisecond) {
		t.Fatal("a read of pending bytes or a change went ahead before the bytes were written")
	}
	tab.wroteDeleg("h", "f", 3<<20, 1<<20)
	if !doneWithin(readPending, time.Second) {
		t.Fatal("a read of bytes just written still waits")
	}
	if doneWithin(change, 100*time.Millisecond) {
		t.Fatal("a change went ahead before the last return step")
	}
	tab.returnDeleg("h", "f", nil, true)
	if !doneWithin(change, time.Second) {
		t.Fatal("a change still waits after the delegation was returned")
	}
	if tab.delegCount.Load() != 0 {
		t.Fatal("a returned delegation is still held")
	}
}

// TestWriteDelegationLease: a holder that stops asking loses its
// delegation when its lease ends; the waiting request then goes ahead.
func TestWriteDelegationLease(t *testing.T) {
	tab := newInvTable(time.Now)
	lease := 300 * time.Millisecond
	tab.longPoll("h", 0, 0, time.Millisecond, lease)
	tab.longPoll("r", 0, 0, time.Millisecond, lease)
	tab.grantWrite("h", "f", false)
	t0 := time.Now()
	if !doneWithin(await(tab, "r", "f", firstBlock, true), 5*time.Second) {
		t.Fatal("a request waits for a silent holder beyond its lease")
	}
	if el := time.Since(t0); el < lease {
		t.Errorf("the delegation was revoked after %v, before the lease of %v ran out", el, lease)
	}
	if _, _, _, force, _ := tab.longPoll("h", 5, 0, time.Millisecond, lease); !force {
		t.Error("a holder whose delegation was revoked is not told to drop its cache")
	}
}

// TestWriteDelegationGrace: delegations listed before a restart wait for
// their holders to reclaim them; requests on them wait until the reclaim
// (then recall) or the end of the grace period.
func TestWriteDelegationGrace(t *testing.T) {
	file := filepath.Join(t.TempDir(), "delegations")
	tab := newInvTable(time.Now)
	tab.loadDelegs(file)
	tab.longPoll("h", 0, 0, time.Millisecond, time.Second)
	tab.grantWrite("h", "f", false)
	tab.grantWrite("h", "g", false)

	// The share restarts.
	tab = newInvTable(time.Now)
	tab.loadDelegs(file)
	_, _, hs, _, _ := tab.longPoll("h", 0, 0, time.Millisecond, time.Second)
	tab.longPoll("r", 0, 0, time.Millisecond, time.Second)
	if tab.grantWrite("r", "f", false) {
		t.Fatal("another agent was granted a delegation its holder may still reclaim")
	}
	onF := await(tab, "r", "f", firstBlock, false)
	if doneWithin(onF, 100*time.Millisecond) {
		t.Fatal("a request went ahead on a delegation not yet reclaimed")
	}
	if !tab.grantWrite("h", "f", true) {
		t.Fatal("the holder could not reclaim its delegation")
	}
	// Reclaimed: the waiting request now recalls it.
	_, recalls, _, _, _ := tab.longPoll("h", hs, 0, time.Second, time.Second)
	if len(recalls) != 1 || recalls[0].Path != "f" {
		t.Fatalf("recalls after a reclaim: %+v", recalls)
	}
	tab.returnDeleg("h", "f", nil, true)
	if !doneWithin(onF, time.Second) {
		t.Fatal("the request still waits after the reclaimed delegation was returned")
	}
	// g is never reclaimed: a request waits until the grace period ends.
	t0 := time.Now()
	if !doneWithin(await(tab, "r", "g", firstBlock, true), graceDelegs+2*time.Second) {
		t.Fatal("a request on a delegation nobody reclaimed waits beyond the grace period")
	}
	if el := time.Since(t0); el < graceDelegs-time.Second {
		t.Errorf("went ahead after %v, inside the grace period", el)
	}
}
