package vfs

import (
	"fmt"
	"testing"
)

// The bound holds: putting past it drops the least recently used entries
// (get counts as a use), by weight; one entry heavier than the bound is
// kept alone.
func TestLRUBound(t *testing.T) {
	l := newLRU(10, func(n int) int { return n })
	for i := range 10 {
		l.put(fmt.Sprint(i), 1)
	}
	if _, ok := l.get("0"); !ok {
		t.Fatal("0 dropped within the bound")
	}
	l.put("big", 3) // drops 1, 2, 3: the least recently used
	for _, k := range []string{"1", "2", "3"} {
		if _, ok := l.get(k); ok {
			t.Errorf("%s kept past the bound", k)
		}
	}
	for _, k := range []string{"0", "4", "9", "big"} {
		if _, ok := l.get(k); !ok {
			t.Errorf("%s dropped, though used more recently than others", k)
		}
	}
	if l.n != 10 || l.len() != 8 {
		t.Errorf("weight %d in %d entries; want 10 in 8", l.n, l.len())
	}
	l.put("big", 1) // a lighter value for the same key
	l.del("4")
	if l.n != 7 || l.len() != 7 {
		t.Errorf("after a lighter put and a delete: weight %d in %d entries; want 7 in 7", l.n, l.len())
	}
	l.drop(func(k string, _ int) bool { return k != "big" })
	if l.len() != 1 || l.n != 1 || l.peek("big") != 1 {
		t.Errorf("drop kept %d entries of weight %d", l.len(), l.n)
	}
	l.put("huge", 50)
	if _, ok := l.get("huge"); !ok || l.len() != 1 {
		t.Errorf("an entry heavier than the bound: kept %v, %d entries", ok, l.len())
	}
}

// A file system with a small bound keeps no more metadata than it, and
// a walk past the bound still sees everything.
func TestMetaEntriesBound(t *testing.T) {
	v, tr, _ := newMemFS(t, Options{MetaEntries: 50})
	dirs := memWalkTree(t, tr, 20)
	ctx := t.Context()
	if n := walk(ctx, t, v, "/uva/alpha/t"); n != dirs*20 {
		t.Fatalf("saw %d files; want %d", n, dirs*20)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.attrs.len() > 50 || v.known.len() > 50 || v.dirs.n > 50 || v.knownDirs.n > 50 {
		t.Errorf("kept %d attributes, %d known, listings of weight %d and %d known; bound 50", v.attrs.len(), v.known.len(), v.dirs.n, v.knownDirs.n)
	}
}
