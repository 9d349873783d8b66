package vfs

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/testenv"
)

// TestRecallBeforeOpenReply: the share records a write delegation before
// it recalls other agents' read holds on the file, and the open's reply
// waits for their acknowledgements; a recall of the delegation that
// reaches the agent meanwhile applies to the delegation the reply brings.
// Answered "not held", it would end the delegation at the share while the
// agent kept its writes back under it: another client would not see them
// after the close.
func TestRecallBeforeOpenReply(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the share's watcher has seen it before the sessions start
	v, _ := newFSWith(t, d, client.Options{Streams: 1, Session: "a"},
		Options{Consistency: consistency.Consistency{Mode: consistency.ModeCallback, Period: consistency.Lease}, Write: WriteBack})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v.Connect(ctx)
	const p = "/uva/alpha/f"

	// b is another agent, whose long polls the test sends.
	b, err := client.New(d.Admin, client.Options{Session: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lease := 10 * time.Second
	first, err := b.GetInvWait(ctx, p, 0, 0, time.Millisecond, lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, p); err != nil { // b holds f
		t.Fatal(err)
	}

	// The share handle is opened in the background, asking for a
	// delegation; the grant recalls b's hold, and the open's reply waits
	// until b acknowledges.
	h, err := v.Open(ctx, p, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := b.GetInvWait(ctx, p, first.Stamp, 0, 5*time.Second, lease)
	if err != nil || !slices.Contains(inv.Paths, "f") {
		t.Fatalf("the grant did not recall b's hold: %+v, %v", inv, err)
	}
	// Another client looks at f: the share recalls the delegation, which
	// the agent has not heard of yet.
	c := d.Client(d.Admin)
	looked := make(chan error, 1)
	go func() {
		_, err := c.Stat(ctx, p)
		looked <- err
	}()
	for v.Delegations().Recalls == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the recall did not reach the agent")
		case <-time.After(time.Millisecond):
		}
	}
	// b acknowledges: the open's reply reaches the agent.
	go b.GetInvWait(ctx, p, inv.Stamp, 0, 200*time.Millisecond, lease)
	h.waitOpen(ctx)
	if err := <-looked; err != nil {
		t.Fatal(err)
	}
	data := []byte("written here")
	if _, err := h.Write(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := c.Stat(ctx, p)
	if err != nil || a.Size != int64(len(data)) {
		t.Fatalf("after the close another client sees %d bytes (%v), not the %d written: they were kept back under a delegation the share had ended", a.Size, err, len(data))
	}
}
