package share

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestInvalidationBuffer(t *testing.T) {
	tab := newInvTable(time.Now)
	tab.capacity = 8
	// A new session is told to drop everything.
	_, s0, force, _ := tab.poll("a", 0, 0, false, 0)
	if !force {
		t.Fatal("first poll without force")
	}
	tab.record("b", "x", "x", "y") // repeats coalesce
	tab.record("a", "own")         // a's own change is not reported to a
	paths, s1, force, again := tab.poll("a", s0, 0, false, 0)
	if force || again || !slices.Equal(paths, []string{"x", "y"}) {
		t.Fatalf("poll: %v force=%v again=%v", paths, force, again)
	}
	// Nothing new: nothing returned.
	if paths, _, force, _ := tab.poll("a", s1, 0, false, 0); len(paths) != 0 || force {
		t.Fatalf("empty poll: %v %v", paths, force)
	}
	// A reply cut at max says poll again.
	for i := range 5 {
		tab.record("", fmt.Sprint("f", i))
	}
	paths, s2, _, again := tab.poll("a", s1, 3, false, 0)
	if len(paths) != 3 || !again {
		t.Fatalf("cut reply: %v again=%v", paths, again)
	}
	paths, s3, _, again := tab.poll("a", s2, 3, false, 0)
	if len(paths) != 2 || again {
		t.Fatalf("rest: %v again=%v", paths, again)
	}
	// Overflow: more changes than the buffer holds force a full drop.
	for i := range 20 {
		tab.record("", fmt.Sprint("g", i))
	}
	if _, _, force, _ := tab.poll("a", s3, 0, false, 0); !force {
		t.Fatal("a wrapped buffer did not force invalidation")
	}
	// A stamp from another life of the share forces too.
	if _, _, force, _ := tab.poll("a", 1<<60, 0, false, 0); !force {
		t.Fatal("a stamp from the future did not force invalidation")
	}
}

// TestCallbackRecall: a long poll returns as soon as something changes; a
// change waits until every callback session acknowledged it; a session
// that stops asking is waited for only until its lease ends, and is then
// told to drop everything.
func TestCallbackRecall(t *testing.T) {
	tab := newInvTable(time.Now)
	lease := 300 * time.Millisecond
	_, _, s0, force, _ := tab.longPoll("a", 0, 0, time.Second, lease)
	if !force {
		t.Fatal("first poll without force")
	}
	tab.poll("b", 0, 0, true, lease) // b is a callback session too
	tab.poll("c", 0, 0, true, lease) // c too, but it holds nothing
	for _, id := range []string{"a", "b"} {
		tab.hold(id, "x")
	}
	got := make(chan []string, 1)
	go func() {
		paths, _, _, _, _ := tab.longPoll("a", s0, 0, 5*time.Second, lease)
		got <- paths
	}()
	time.Sleep(20 * time.Millisecond)
	done := make(chan struct{})
	go func() {
		stamp, recalled := tab.record("writer", "x")
		if len(recalled) != 2 {
			t.Errorf("%d sessions recalled, want the two holders", len(recalled))
		}
		tab.waitAcked(stamp, recalled)
		close(done)
	}()
	paths := <-got
	if len(paths) != 1 || paths[0] != "x" {
		t.Fatalf("long poll returned %v", paths)
	}
	select {
	case <-done:
		t.Fatal("the change was acknowledged before a acknowledged the recall")
	case <-time.After(50 * time.Millisecond):
	}
	tab.mu.Lock()
	s1 := tab.clock
	tab.mu.Unlock()
	t0 := time.Now()
	go tab.poll("a", s1, 0, true, lease) // a acknowledges; b never does
	<-done
	if el := time.Since(t0); el < 150*time.Millisecond || el > 2*time.Second {
		t.Errorf("the change waited %v for a silent session with a lease of %v", el, lease)
	}
	if _, _, force, _ := tab.poll("b", s0, 0, true, lease); !force {
		t.Error("a session that missed a recall was not told to drop everything")
	}
}

// TestCallbackOwedAck: a change made while a session has a recall it has
// not acknowledged waits for that session even though it concerns nothing
// the session holds; the session's next long poll answers at once, so
// that the poll after it acknowledges the change, instead of holding the
// change up for the whole wait.
func TestCallbackOwedAck(t *testing.T) {
	tab := newInvTable(time.Now)
	lease := 5 * time.Second
	_, _, s0, _, _ := tab.longPoll("b", 0, 0, time.Second, lease)
	tab.hold("b", "x")
	tab.record("w1", "x")
	paths, _, s1, _, _ := tab.longPoll("b", s0, 0, time.Second, lease)
	if !slices.Equal(paths, []string{"x"}) {
		t.Fatalf("recall of x: %v", paths)
	}
	// b has not acknowledged x yet: a change of z waits for it.
	stamp, recalled := tab.record("w2", "z")
	if len(recalled) != 1 || stamp <= s1 {
		t.Fatalf("%d sessions recalled at stamp %d (b's stamp %d)", len(recalled), stamp, s1)
	}
	done := make(chan struct{})
	go func() {
		tab.waitAcked(stamp, recalled)
		close(done)
	}()
	type reply struct {
		paths []string
		stamp uint64
	}
	got := make(chan reply, 1)
	go func() {
		paths, _, s2, _, _ := tab.longPoll("b", s1, 0, time.Minute, lease)
		got <- reply{paths, s2}
	}()
	var r reply
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("a long poll owed to a waiting change was held for its whole wait")
	}
	if len(r.paths) != 0 || r.stamp < stamp {
		t.Fatalf("long poll returned %v at stamp %d, want nothing at %d or later", r.paths, r.stamp, stamp)
	}
	go tab.longPoll("b", r.stamp, 0, time.Minute, lease) // acknowledges
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the change was not acknowledged")
	}
}

// TestCallbackGoodbye: a poll without wait from a callback session (its
// agent stopping) ends the session's callbacks: the long poll it still has
// held returns without declaring it a callback session again, and a later
// change of a path it held is recorded for it but recalls nothing and
// waits for nobody.
func TestCallbackGoodbye(t *testing.T) {
	tab := newInvTable(time.Now)
	lease := 3 * time.Second
	_, _, s0, _, _ := tab.longPoll("a", 0, 0, time.Millisecond, lease)
	tab.hold("a", "x")
	ended := make(chan struct{})
	go func() {
		tab.longPoll("a", s0, 0, 30*time.Second, lease)
		close(ended)
	}()
	time.Sleep(20 * time.Millisecond) // the long poll is held
	tab.poll("a", s0, 0, false, 0)    // goodbye
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll held for the session outlived its goodbye")
	}
	if !tab.ended("a") {
		t.Fatal("the long poll declared the session a callback session again")
	}
	if _, recalled := tab.record("writer", "x"); len(recalled) != 0 {
		t.Errorf("%d sessions recalled after the goodbye", len(recalled))
	}
	if paths, _, force, _ := tab.poll("a", s0, 0, false, 0); force || len(paths) != 1 || paths[0] != "x" {
		t.Errorf("the session after its goodbye: paths %v, force %v; want x, no force", paths, force)
	}
}
