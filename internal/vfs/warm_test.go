package vfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/testenv"
)

// runAgent starts one run of an agent on the cache in dir, with a session
// of its own (as a restarted agent has), and connects it. stop ends the
// run (the cache written to disk); the test's end stops it too.
func runAgent(t *testing.T, d *testenv.Domain, dir string, pol consistency.Consistency) (v *FS, c *client.Client, stop func()) {
	t.Helper()
	c, err := client.New(d.Admin, client.Options{Streams: 1, Session: fmt.Sprint("warm-", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := cache.Open(cache.Options{Dir: dir})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	v = New(c, client.Data(c), ch, Options{Consistency: pol})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			v.Close()
			ch.Close()
			c.Close()
		})
	}
	t.Cleanup(stop)
	return v, c, stop
}

// warmModes are the modes whose restarted agents validate what they
// persisted; the window is long enough for a walk to fit in it.
var warmModes = []consistency.Consistency{{Mode: consistency.ModeWindow, Period: time.Minute}, {Mode: consistency.ModePoll, Period: 2 * time.Second}, {Mode: consistency.ModeCallback}}

// An agent restarted on the same cache looks up the mount's root and walks
// the tree it walked before with one validation request to the share, and
// no listing or getattr.
func TestRestartWalkValidatesOnce(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	const files = 5
	dirs := walkTree(t, root, files)
	for _, pol := range warmModes {
		t.Run(pol.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dir := t.TempDir()
			v, _, stop := runAgent(t, d, dir, pol)
			v.Connect(ctx)
			if _, err := v.GetAttr(ctx, "/uva/alpha"); err != nil {
				t.Fatal(err)
			}
			if n := walk(ctx, t, v, "/uva/alpha/t"); n != dirs*files {
				t.Fatalf("first walk: saw %d files; want %d", n, dirs*files)
			}
			stop()
			v, c, _ := runAgent(t, d, dir, pol)
			before := c.Counts()
			v.Connect(ctx)
			if _, err := v.GetAttr(ctx, "/uva/alpha"); err != nil {
				t.Fatal(err)
			}
			if n := walk(ctx, t, v, "/uva/alpha/t"); n != dirs*files {
				t.Fatalf("walk after the restart: saw %d files; want %d", n, dirs*files)
			}
			got := rpcsSince(c.Counts(), before)
			if got["validate"] != 1 || got["readdir"] != 0 || got["getattr"]+got["fgetattr"] != 0 {
				t.Errorf("restart and walk: %v; want one validate, no readdir, no getattr", got)
			}
			if w := v.Warmed(); w < uint64(dirs) {
				t.Errorf("%d listings confirmed; want at least %d", w, dirs)
			}
		})
	}
}

// Under strict a restarted agent validates nothing: it trusts nothing it
// persisted, and asks the share as before.
func TestRestartStrictValidatesNothing(t *testing.T) {
	d := testenv.New(t, "uva")
	dirs := walkTree(t, d.AddShare("alpha"), 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	strict := consistency.Consistency{Mode: consistency.ModeStrict}
	v, _, stop := runAgent(t, d, dir, strict)
	v.Connect(ctx)
	walk(ctx, t, v, "/uva/alpha/t")
	stop()
	v, c, _ := runAgent(t, d, dir, strict)
	before := c.Counts()
	v.Connect(ctx)
	walk(ctx, t, v, "/uva/alpha/t")
	if got := rpcsSince(c.Counts(), before); got["validate"] != 0 || got["readdir"] < uint64(dirs) {
		t.Errorf("strict, restart and walk: %v; want no validate and a listing per directory (%d)", got, dirs)
	}
}

// Changes made while an agent was down, at the share and through another
// agent, are seen by the restarted agent: a rename, a delete and a new
// file in a directory whose listing it persisted, and a rewrite (same
// size) of a file whose attributes it persisted. A directory that did not
// change costs no listing.
func TestRestartSeesChangesWhileDown(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	for _, dd := range []string{"w/s", "u"} {
		if err := os.MkdirAll(filepath.Join(root, dd), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"w/a", "w/b", "w/c", "w/s/f", "u/x", "u/y"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("old!"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, pol := range warmModes {
		t.Run(pol.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			w := fmt.Sprintf("w%d", i)
			if err := os.Rename(filepath.Join(root, "w"), filepath.Join(root, w)); err != nil {
				t.Fatal(err)
			}
			defer os.Rename(filepath.Join(root, w), filepath.Join(root, "w"))
			g := "/uva/alpha/" + w
			dir := t.TempDir()
			v, _, stop := runAgent(t, d, dir, pol)
			v.Connect(ctx)
			walk(ctx, t, v, "/uva/alpha")
			stop()

			// While it is down: at the share, and through another agent.
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(os.Rename(filepath.Join(root, w, "a"), filepath.Join(root, w, "a2")))
			must(os.Remove(filepath.Join(root, w, "b")))
			must(os.WriteFile(filepath.Join(root, w, "new"), []byte("n"), 0o644))
			other, _ := newFSWith(t, d, client.Options{Streams: 1}, Options{Consistency: consistency.Consistency{Mode: consistency.ModeStrict}})
			h, err := other.Open(ctx, g+"/s/f", syscall.O_RDWR)
			must(err)
			_, err = h.Write(ctx, []byte("new!"), 0)
			must(err)
			must(h.Release(ctx))
			defer func() { // undo for the next mode
				os.Rename(filepath.Join(root, w, "a2"), filepath.Join(root, w, "a"))
				os.WriteFile(filepath.Join(root, w, "b"), []byte("old!"), 0o644)
				os.Remove(filepath.Join(root, w, "new"))
			}()
			st, err := os.Stat(filepath.Join(root, w, "s", "f"))
			must(err)

			v, c, _ := runAgent(t, d, dir, pol)
			before := c.Counts()
			v.Connect(ctx)
			ents, err := v.ReadDir(ctx, g)
			must(err)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name)
			}
			slices.Sort(names)
			if want := []string{"a2", "c", "new", "s"}; !slices.Equal(names, want) {
				t.Errorf("%s after the restart: %v; want %v", g, names, want)
			}
			a, err := v.GetAttr(ctx, g+"/s/f")
			must(err)
			if a.Mtime != st.ModTime().UnixNano() || a.Size != 4 {
				t.Errorf("%s/s/f after the restart: mtime %d size %d; the share has %d, 4", g, a.Mtime, a.Size, st.ModTime().UnixNano())
			}
			if _, err := v.GetAttr(ctx, g+"/b"); !errors.Is(err, syscall.ENOENT) {
				t.Errorf("%s/b, deleted while the agent was down: %v; want ENOENT", g, err)
			}
			mid := rpcsSince(c.Counts(), before)
			if _, err := v.ReadDir(ctx, "/uva/alpha/u"); err != nil {
				t.Fatal(err)
			}
			if got := rpcsSince(c.Counts(), before); got["validate"] != 1 || got["readdir"] != mid["readdir"] {
				t.Errorf("listing the unchanged /uva/alpha/u after the restart: %v (before it: %v); want one validate in all and no listing of it", got, mid)
			}
		})
	}
}
