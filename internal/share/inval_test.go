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
	_, s0, force, _ := tab.poll("a", 0, 0)
	if !force {
		t.Fatal("first poll without force")
	}
	tab.record("b", "x", "x", "y") // repeats coalesce
	tab.record("a", "own")         // a's own change is not reported to a
	paths, s1, force, again := tab.poll("a", s0, 0)
	if force || again || !slices.Equal(paths, []string{"x", "y"}) {
		t.Fatalf("poll: %v force=%v again=%v", paths, force, again)
	}
	// Nothing new: nothing returned.
	if paths, _, force, _ := tab.poll("a", s1, 0); len(paths) != 0 || force {
		t.Fatalf("empty poll: %v %v", paths, force)
	}
	// A reply cut at max says poll again.
	for i := range 5 {
		tab.record("", fmt.Sprint("f", i))
	}
	paths, s2, _, again := tab.poll("a", s1, 3)
	if len(paths) != 3 || !again {
		t.Fatalf("cut reply: %v again=%v", paths, again)
	}
	paths, s3, _, again := tab.poll("a", s2, 3)
	if len(paths) != 2 || again {
		t.Fatalf("rest: %v again=%v", paths, again)
	}
	// Overflow: more changes than the buffer holds force a full drop.
	for i := range 20 {
		tab.record("", fmt.Sprint("g", i))
	}
	if _, _, force, _ := tab.poll("a", s3, 0); !force {
		t.Fatal("a wrapped buffer did not force invalidation")
	}
	// A stamp from another life of the share forces too.
	if _, _, force, _ := tab.poll("a", 1<<60, 0); !force {
		t.Fatal("a stamp from the future did not force invalidation")
	}
}
