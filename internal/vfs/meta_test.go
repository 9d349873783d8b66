package vfs

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/wire"
)

// walkTree makes dirs directories of files files each under root/t: t
// holds three directories, each two more.
func walkTree(t *testing.T, root string, files int) (dirs int) {
	t.Helper()
	var all []string
	for i := range 3 {
		d := filepath.Join(root, "t", fmt.Sprint("d", i))
		all = append(all, d)
		for j := range 2 {
			all = append(all, filepath.Join(d, fmt.Sprint("e", j)))
		}
	}
	all = append(all, filepath.Join(root, "t"))
	for _, d := range all {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for k := range files {
			if err := os.WriteFile(filepath.Join(d, fmt.Sprint("f", k, ".c")), []byte("int x;\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return len(all)
}

// walk does what find and stat do through the kernel: the attributes of
// the top, then each directory's listing and the attributes of every
// entry in it. It returns the files seen.
func walk(ctx context.Context, t *testing.T, v *FS, p string) int {
	t.Helper()
	if _, err := v.GetAttr(ctx, p); err != nil {
		t.Fatal(err)
	}
	ents, err := v.ReadDir(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		kid := path.Join(p, e.Name)
		a, err := v.GetAttr(ctx, kid)
		if err != nil {
			t.Fatal(err)
		}
		if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			n += walk(ctx, t, v, kid)
		} else {
			n++
		}
	}
	return n
}

// A walk costs at most one listing per directory and no request per file
// in window, poll and callback; a walk again at once costs nothing; under
// window a walk after the window costs one listing per directory again,
// not one request per file.
func TestWalkRoundTripsPerDirectory(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	const files = 5
	dirs := walkTree(t, root, files)
	period := 2 * time.Second
	for _, pol := range []consistency.Consistency{{Mode: consistency.ModeWindow, Period: period}, {Mode: consistency.ModePoll, Period: period}, {Mode: consistency.ModeCallback}} {
		t.Run(pol.String(), func(t *testing.T) {
			v, c := newFSWith(t, d, client.Options{Streams: 1, Session: fmt.Sprint("walk-", pol.Mode)}, Options{Consistency: pol})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			v.Connect(ctx)
			look := func(what string, maxListings uint64) {
				t.Helper()
				before := c.Counts()
				if n := walk(ctx, t, v, "/uva/alpha/t"); n != dirs*files {
					t.Fatalf("%s: saw %d files; want %d", what, n, dirs*files)
				}
				got := rpcsSince(c.Counts(), before)
				if got["readdir"] > maxListings || got["getattr"]+got["fgetattr"] > 1 {
					t.Errorf("%s: %v; want at most %d listings and one getattr (the top)", what, got, maxListings)
				}
			}
			look("first walk", uint64(dirs))
			look("walk again at once", 0)
			if pol.Mode == consistency.ModeWindow {
				time.Sleep(period + 200*time.Millisecond)
				look("walk after the window", uint64(dirs))
			}
		})
	}
}

// The attributes of a file that are no longer fresh are revalidated with
// its directory's listing, which makes its siblings fresh too: stat'ing
// every file of a directory costs one request, and sees a change made at
// the share.
func TestStaleAttrsRevalidatedByDirectory(t *testing.T) {
	period := 300 * time.Millisecond
	v, tr, c := newMemFS(t, Options{Consistency: consistency.Consistency{Mode: consistency.ModeWindow, Period: period}})
	ctx := context.Background()
	if _, err := tr.Mkdir(ctx, "/uva/alpha/src", 0o755); err != nil {
		t.Fatal(err)
	}
	for k := range 8 {
		memWrite(t, tr, fmt.Sprint("/uva/alpha/src/f", k), []byte("x"))
	}
	if _, err := v.ReadDir(ctx, "/uva/alpha/src"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(period + 100*time.Millisecond)
	memWrite(t, tr, "/uva/alpha/src/f3", []byte("longer"))
	before := c.Counts()
	for k := range 8 {
		a, err := v.GetAttr(ctx, fmt.Sprint("/uva/alpha/src/f", k))
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int64{true: 6, false: 1}[k == 3]; a.Size != want {
			t.Errorf("f%d: size %d; want %d", k, a.Size, want)
		}
	}
	if got := rpcsSince(c.Counts(), before); got["readdir"] != 1 || got["getattr"] != 0 {
		t.Errorf("stat of 8 stale files of one directory: %v; want one readdir and no getattr", got)
	}
}

// Two callers that want the same listing share one request, unless an
// invalidation came between them: then the second asks the share itself
// (the first's answer may predate a change this agent has just made).
func TestListingSharedUnlessInvalidated(t *testing.T) {
	v, tr, c := newMemFS(t, Options{})
	memWrite(t, tr, "/uva/alpha/real.c", nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const p = "/uva/alpha"
	pol := v.opts.rule(p)
	flight := func() *listFlight {
		v.mu.Lock()
		defer v.mu.Unlock()
		f := &listFlight{done: make(chan struct{}), gen: v.gen, entries: []wire.DirEntry{{Name: "shared.c"}}}
		v.listing[p] = f
		return f
	}
	f := flight()
	time.AfterFunc(50*time.Millisecond, func() { close(f.done) })
	before := c.Counts()
	got, err := v.listShared(ctx, p, pol, time.Time{})
	if err != nil || len(got) != 1 || got[0].Name != "shared.c" || rpcsSince(c.Counts(), before)["readdir"] != 0 {
		t.Fatalf("a listing under way: got %v (%v), %v; want it shared, no request", got, err, rpcsSince(c.Counts(), before))
	}
	flight()                     // never ends
	v.forget("/uva/alpha/other") // an invalidation
	got, err = v.listShared(ctx, p, pol, time.Time{})
	if err != nil || len(got) != 1 || got[0].Name != "real.c" || rpcsSince(c.Counts(), before)["readdir"] != 1 {
		t.Fatalf("after an invalidation: got %v (%v), %v; want the share's listing, asked for", got, err, rpcsSince(c.Counts(), before))
	}
}

// Listing a directory fetches the listings of its subdirectories, two
// levels down, ahead of the walk: listing them then costs no request.
// Not under strict.
func TestListAhead(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	walkTree(t, root, 2)
	for _, pol := range []consistency.Consistency{{Mode: consistency.ModeWindow, Period: time.Minute}, {Mode: consistency.ModeStrict}} {
		v, c := newFSWith(t, d, client.Options{Streams: 1}, Options{Consistency: pol})
		ctx := context.Background()
		if _, err := v.ReadDir(ctx, "/uva/alpha/t"); err != nil {
			t.Fatal(err)
		}
		deep := "/uva/alpha/t/d2/e1"
		if pol.Mode == consistency.ModeStrict {
			time.Sleep(200 * time.Millisecond)
			if n := v.ListedAhead(); n != 0 {
				t.Errorf("strict: %d listings fetched ahead", n)
			}
			continue
		}
		start := time.Now()
		for {
			v.mu.Lock()
			_, ok := v.dirs.get(deep)
			v.mu.Unlock()
			if ok {
				break
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("%s not listed ahead", deep)
			}
			time.Sleep(10 * time.Millisecond)
		}
		before := c.Counts()
		for _, p := range []string{"/uva/alpha/t/d0", "/uva/alpha/t/d1/e0", deep} {
			if _, err := v.ReadDir(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		if got := rpcsSince(c.Counts(), before); got["readdir"] != 0 {
			t.Errorf("listings fetched ahead: %v to list them again", got)
		}
	}
}

// A listing fetched ahead and never used is not fetched ahead again once
// stale (listing a directory over and over does not keep its
// subdirectories' listings fresh); one a walk used is.
func TestListAheadOnlyWhatWasUsed(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	walkTree(t, root, 1)
	period := 300 * time.Millisecond
	v, c := newFSWith(t, d, client.Options{Streams: 1}, Options{Consistency: consistency.Consistency{Mode: consistency.ModeWindow, Period: period}})
	ctx := context.Background()
	settled := func() map[string]uint64 {
		t.Helper()
		before := c.Counts()
		if _, err := v.ReadDir(ctx, "/uva/alpha/t"); err != nil {
			t.Fatal(err)
		}
		// Let what was queued ahead be fetched.
		for range 200 {
			v.mu.Lock()
			busy := len(v.listing) > 0 || len(v.aheadQ) > 0
			v.mu.Unlock()
			if !busy {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		return rpcsSince(c.Counts(), before)
	}
	if got := settled(); got["readdir"] < 4 {
		t.Fatalf("first listing: %v; want it and its subdirectories' listed ahead", got)
	}
	time.Sleep(period + 100*time.Millisecond)
	if got := settled(); got["readdir"] != 1 {
		t.Errorf("listed again after the window: %v; want only the directory listed (its subdirectories were never used)", got)
	}
	for _, p := range []string{"/uva/alpha/t/d0", "/uva/alpha/t/d1"} {
		if _, err := v.ReadDir(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(period + 100*time.Millisecond)
	if got := settled(); got["readdir"] < 3 {
		t.Errorf("listed again after a walk used d0 and d1: %v; want them listed ahead again", got)
	}
}
