package vfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/testenv"
)

// The stale entries of a listing too large to fetch again whole are
// revalidated a page at a time: stat'ing every entry after the window
// costs about one readdir per revalidatePage entries and no getattr, and
// sees what changed at the share (a file grown, one removed).
func TestLargeListingRevalidatedByPage(t *testing.T) {
	const n = listRevalidateMax + 2*revalidatePage + 10
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	dir := filepath.Join(root, "big")
	os.MkdirAll(dir, 0o755)
	name := func(i int) string { return fmt.Sprintf("f%05d", i) }
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, name(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	period := 300 * time.Millisecond
	v, c := newFSWith(t, d, client.Options{Streams: 1}, Options{Consistency: consistency.Consistency{Mode: consistency.ModeWindow, Period: period}})
	ctx := context.Background()
	ents, err := v.ReadDir(ctx, "/uva/alpha/big")
	if err != nil || len(ents) != n {
		t.Fatalf("listed %d entries of %d: %v", len(ents), n, err)
	}
	time.Sleep(period + 100*time.Millisecond)
	grown, gone := 3*revalidatePage/2, n-5
	if err := os.WriteFile(filepath.Join(dir, name(grown)), []byte("longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, name(gone))); err != nil {
		t.Fatal(err)
	}
	before := c.Counts()
	for i := range n {
		a, err := v.GetAttr(ctx, "/uva/alpha/big/"+name(i))
		switch {
		case i == gone:
			if err == nil {
				t.Errorf("%s: removed at the share, still there after the window", name(i))
			}
		case err != nil:
			t.Fatalf("%s: %v", name(i), err)
		case i == grown && a.Size != 6, i != grown && a.Size != 0:
			t.Errorf("%s: size %d", name(i), a.Size)
		}
	}
	got := rpcsSince(c.Counts(), before)
	// One page more: the one that starts at the removed entry.
	if pages := uint64(n/revalidatePage + 2); got["readdir"] > pages || got["getattr"] > 1 {
		t.Errorf("stat of %d stale entries of one directory: %v; want at most %d readdirs (pages) and the getattr of the removed entry", n, got, pages)
	}
}

// A directory larger than the bound on metadata allows is listed a page
// at a time; whether read by pages or whole, its listing is not kept, and
// the attributes kept stay within the bound.
func TestPagedListingKeepsTheBound(t *testing.T) {
	const n, bound = 3000, 400
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	dir := filepath.Join(root, "big")
	os.MkdirAll(dir, 0o755)
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v, _ := newFSWith(t, d, client.Options{Streams: 1}, Options{MetaEntries: bound})
	ctx := context.Background()
	const p = "/uva/alpha/big"
	if !v.Paged(ctx, p) {
		t.Fatalf("a directory of %d entries is not listed by pages under a bound of %d", n, bound)
	}
	seen, pages := 0, 0
	for after := ""; ; pages++ {
		ents, more, err := v.ReadDirPage(ctx, p, after)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if want := fmt.Sprintf("f%05d", seen); e.Name != want {
				t.Fatalf("entry %d is %q; want %q", seen, e.Name, want)
			}
			seen++
		}
		if !more {
			break
		}
		after = ents[len(ents)-1].Name
	}
	if seen != n || pages < 1 {
		t.Fatalf("pages gave %d entries in %d pages; want %d", seen, pages+1, n)
	}
	if ents, err := v.ReadDir(ctx, p); err != nil || len(ents) != n {
		t.Fatalf("listed whole: %d entries, %v", len(ents), err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.dirs.get(p); ok {
		t.Errorf("a listing of %d entries kept under a bound of %d", n, bound)
	}
	if v.attrs.len() > bound || v.known.len() > bound || v.dirs.n > bound || v.knownDirs.n > bound {
		t.Errorf("kept %d attributes, %d known, listings of weight %d and %d known; bound %d", v.attrs.len(), v.known.len(), v.dirs.n, v.knownDirs.n, bound)
	}
}
