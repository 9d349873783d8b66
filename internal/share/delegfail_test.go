package share

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	if !(tab.grantWrite("h", "f", false) != 0) {
		t.Fatal("no delegation granted")
	}
	full := &wire.Error{Code: wire.CodeNoSpace, Message: "/f: full"}
	if tab.failReturn("h", "f", 0, full) {
		t.Fatal("a failure was taken for a delegation not recalled")
	}
	var got error
	done := make(chan struct{})
	go func() { got = tab.awaitDeleg("r", "f", firstBlock, false); close(done) }()
	_, recalls, _, _, _ := tab.longPoll("h", hs, 0, time.Second, lease)
	if len(recalls) != 1 {
		t.Fatalf("recalls sent to the holder: %+v", recalls)
	}
	if tab.failReturn("r", "f", 0, full) {
		t.Fatal("a session that does not hold the delegation reported its failure")
	}
	if doneWithin(done, 100*time.Millisecond) {
		t.Fatalf("the request went ahead on another session's failure report: %v", got)
	}
	if !tab.failReturn("h", "f", 0, full) {
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
	tab.returnDeleg("h", "f", 0, nil, true)
	if err := tab.awaitDeleg("r", "f", firstBlock, false); err != nil {
		t.Fatalf("after the return: %v", err)
	}

	// A holder that stops polling: its failure does not outlive its lease.
	if !(tab.grantWrite("h", "g", false) != 0) {
		t.Fatal("no delegation granted")
	}
	go tab.awaitDeleg("r", "g", firstBlock, false)
	waitFor(t, func() bool { return tab.recalling("g") })
	if !tab.failReturn("h", "g", 0, full) {
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

// TestDelegReturnFailureRequest: through the share's requests, a stat that
// recalls a write delegation fails with the holder's ENOSPC and a message
// naming the file, the share and the holder's reason; any other code is
// EIO. A reason over the limit is refused (EINVAL) and changes nothing:
// the waiter still waits, and the holder's return lets it through.
func TestDelegReturnFailureRequest(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	ag := newAgents(t, root, "w", "r")
	ws := ag.poll("w", 0, time.Millisecond).Stamp
	ag.poll("r", 0, time.Millisecond)
	resp, ok := <-ag.open("w", "a", wire.OpenWrite|wire.OpenDeleg)
	if !ok || !resp.Deleg {
		t.Fatalf("no write delegation granted: %+v", resp)
	}
	type result struct{ err error }
	stat := func() chan result {
		ch := make(chan result, 1)
		go func() { _, err := ag.stat("r", "a"); ch <- result{err} }()
		return ch
	}
	first := stat()
	rec := ag.poll("w", ws, 5*time.Second)
	if len(rec.Recalls) != 1 {
		t.Fatalf("recalls sent to the holder: %+v", rec.Recalls)
	}
	ret := func(code wire.Code, msg string) error {
		_, err := ag.serve("w", wire.OpDelegReturn, wire.DelegReturnReq{Tok: 1, Session: "w", Path: "a", Code: code, Message: msg}, nil)
		return err
	}
	if err := ret(wire.CodeNoSpace, strings.Repeat("x", wire.MaxReturnMessage+1)); wire.CodeOf(err) != wire.CodeInvalid {
		t.Fatalf("a reason over the limit: %v, want EINVAL", err)
	}
	select {
	case r := <-first:
		t.Fatalf("the waiter was answered after a refused failure report: %v", r.err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := ret(wire.CodeNoSpace, "write /a: no space left on device\n\x1b[31m"); err != nil {
		t.Fatal(err)
	}
	r := <-first
	var we *wire.Error
	if !errors.As(r.err, &we) || we.Code != wire.CodeNoSpace || !slices.Equal(we.Paths, []string{"a"}) {
		t.Fatalf("the waiter: %v, want ENOSPC naming a", r.err)
	}
	for _, want := range []string{"/a:", "could not be written to share", "no space left on device", "space is freed"} {
		if !strings.Contains(we.Message, want) {
			t.Errorf("message %q lacks %q", we.Message, want)
		}
	}
	if strings.ContainsAny(we.Message, "\n\x1b") {
		t.Errorf("message %q carries control characters", we.Message)
	}
	// Another code from the holder reaches the waiters as EIO.
	if err := ret(wire.CodeAccess, "no"); err != nil {
		t.Fatal(err)
	}
	if r := <-stat(); wire.CodeOf(r.err) != wire.CodeIO {
		t.Errorf("after a failure with EACCES: %v, want EIO", r.err)
	}
	if _, err := ag.serve("w", wire.OpDelegReturn, wire.DelegReturnReq{Tok: 1, Session: "w", Path: "a", Done: true}, nil); err != nil {
		t.Fatal(err)
	}
	if r := <-stat(); r.err != nil {
		t.Fatalf("after the return: %v", r.err)
	}
}
