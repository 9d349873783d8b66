package vfs

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/testenv"
)

// TestCloseEndsCallbackSession: an agent under callback that stops ends
// its session at the share, so that a later change of a file it held is
// not held up waiting for its lease, and its session is not marked as
// having missed a recall (which the share would have done, with the
// session still expected to answer). Before, a make run after another
// agent under callback stopped waited out that agent's lease.
func TestCloseEndsCallbackSession(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the share's watcher has seen it before the session starts
	v, _ := newFSWith(t, d, client.Options{Streams: 1, Session: "a"},
		Options{Consistency: consistency.Consistency{Mode: consistency.ModeCallback, Period: consistency.Lease}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v.Connect(ctx)
	const p = "/uva/alpha/f"
	if _, err := v.GetAttr(ctx, p); err != nil { // a holds f
		t.Fatal(err)
	}
	v.Close()
	v.mu.Lock()
	pl := v.pollers["alpha"]
	v.mu.Unlock()
	if pl == nil {
		t.Fatal("no poller for share alpha")
	}
	pl.mu.Lock()
	since := pl.since
	pl.mu.Unlock()

	// Another client changes f: a is not asked to give it up.
	b, err := client.New(d.Admin, client.Options{Session: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Truncate(ctx, p, 1); err != nil {
		t.Fatal(err)
	}
	// Session a, polled where it left off, is told what changed, not
	// told to drop everything (what a session that missed a recall is
	// told).
	c, err := client.New(d.Admin, client.Options{Session: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.GetInv(ctx, p, since, 100)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Force {
		t.Fatalf("the stopped agent's session missed a recall: its callback session was still open at the share")
	}
}
