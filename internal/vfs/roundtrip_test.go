package vfs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/wan"
)

// rpcsSince returns the client's RPC counts by kind since before.
func rpcsSince(now, before map[string]uint64) map[string]uint64 {
	out := make(map[string]uint64)
	for k, v := range now {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// A small file's cold read comes with its open: no read request. A larger
// one is read as before, and both read what the share holds.
func TestSmallFileComesWithOpen(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	small := bytes.Repeat([]byte("int x = 1;\n"), 300)
	large := pattern(firstMax+5, 3)
	os.WriteFile(filepath.Join(root, "small.c"), small, 0o644)
	os.WriteFile(filepath.Join(root, "large.bin"), large, 0o644)
	v, c := newFS(t, d)
	ctx := context.Background()

	for _, f := range []struct {
		name  string
		want  []byte
		reads uint64
	}{{"small.c", small, 0}, {"large.bin", large, 1}} {
		h, err := v.Open(ctx, "/uva/alpha/"+f.name, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		before := c.Counts()
		got := make([]byte, len(f.want)+100)
		n, err := h.Read(ctx, got, 0)
		if err != nil || !bytes.Equal(got[:n], f.want) {
			t.Fatalf("%s: read %d bytes, %v; differs from the share's", f.name, n, err)
		}
		h.Release(ctx)
		if got := rpcsSince(c.Counts(), before)["read"]; got != f.reads {
			t.Errorf("%s: %d read requests for a cold read, want %d", f.name, got, f.reads)
		}
	}

	// Changed at the share: the next open's bytes are the new ones.
	newer := bytes.Repeat([]byte("int y = 2;\n"), 100)
	os.WriteFile(filepath.Join(root, "small.c"), newer, 0o644)
	v.invalidate("/uva/alpha/small.c")
	h, err := v.Open(ctx, "/uva/alpha/small.c", syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	got := make([]byte, 8192)
	n, err := h.Read(ctx, got, 0)
	if err != nil || !bytes.Equal(got[:n], newer) {
		t.Fatalf("after a change at the share: read %q, %v", got[:min(n, 20)], err)
	}
}

// A lookup of a name that a fresh listing of its directory lacks costs no
// round trip; once this agent creates the name, it is found.
func TestMissingNameFromListing(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	os.WriteFile(filepath.Join(root, "s1.c"), []byte("x"), 0o644)
	v, c := newFS(t, d)
	ctx := context.Background()

	if _, err := v.ReadDir(ctx, "/uva/alpha"); err != nil {
		t.Fatal(err)
	}
	before := c.Counts()
	for range 3 {
		if _, err := v.GetAttr(ctx, "/uva/alpha/s1.o"); !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("lookup of a missing name: %v, want ENOENT", err)
		}
		if _, err := v.GetAttr(ctx, "/uva/alpha/s1.c"); err != nil {
			t.Fatal(err)
		}
	}
	if got := rpcsSince(c.Counts(), before); len(got) != 0 {
		t.Errorf("lookups answered by a fresh listing made requests: %v", got)
	}
	// The kernel keeps that answer no longer than the listing is good for.
	if kt, dt := v.KernelTimeout("/uva/alpha/s1.o"), v.KernelTimeout("/uva/alpha"); kt > dt {
		t.Errorf("kernel timeout of a name missing from the listing %v, beyond the listing's %v", kt, dt)
	}

	h, _, err := v.Create(ctx, "/uva/alpha/s1.o", syscall.O_WRONLY|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	if _, err := v.GetAttr(ctx, "/uva/alpha/s1.o"); err != nil {
		t.Errorf("a name this agent created: %v", err)
	}
	// The create kept the listing, with the new name in it: the next
	// missing name still costs nothing, and a listing shows the new one.
	before = c.Counts()
	if _, err := v.GetAttr(ctx, "/uva/alpha/s2.o"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("lookup of a missing name after a create: %v, want ENOENT", err)
	}
	ents, err := v.ReadDir(ctx, "/uva/alpha")
	if err != nil {
		t.Fatal(err)
	}
	if got := rpcsSince(c.Counts(), before); len(got) != 0 {
		t.Errorf("a lookup and a listing after a create made requests: %v", got)
	}
	if len(ents) != 2 || ents[1].Name != "s1.o" {
		t.Errorf("listing after a create: %v", ents)
	}

	// Strict asks the share every time.
	s, c2 := newFS(t, d)
	s.opts.Consistency = consistency.Consistency{Mode: consistency.ModeStrict}
	if _, err := s.ReadDir(ctx, "/uva/alpha"); err != nil {
		t.Fatal(err)
	}
	before = c2.Counts()
	os.WriteFile(filepath.Join(root, "late.o"), nil, 0o644)
	if _, err := s.GetAttr(ctx, "/uva/alpha/late.o"); err != nil {
		t.Errorf("strict: a name made at the share after the listing: %v", err)
	}
	if rpcsSince(c2.Counts(), before)["getattr"] == 0 {
		t.Errorf("strict answered a lookup without asking the share")
	}
}

// proxiedShare adds share alpha to d, reached through a WAN proxy that
// adds no delay, and returns its root and a function that replaces the
// proxy by one whose round trips take rtt; that function returns once c
// reaches path p through the new one.
func proxiedShare(t *testing.T, d *testenv.Domain) (root string, slowDown func(c *client.Client, p string, rtt time.Duration)) {
	t.Helper()
	shareAddr, proxyAddr := testenv.FreePort(t), testenv.FreePort(t)
	px, err := wan.Listen(proxyAddr, shareAddr, wan.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	root = d.AddShareAt("alpha", shareAddr, proxyAddr)
	return root, func(c *client.Client, p string, rtt time.Duration) {
		t.Helper()
		px.Close()
		slow, err := wan.Listen(proxyAddr, shareAddr, wan.Config{RTT: rtt})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { slow.Close() })
		for { // until the client has connected again, through the slow link
			if _, err := c.Stat(context.Background(), p); err == nil {
				return
			}
		}
	}
}

// Reads of cached data, flushes and stats of a handle do not wait for the
// share handle its open asks for in the background.
func TestCachedReadDoesNotWaitForOpen(t *testing.T) {
	d := testenv.New(t, "uva")
	root, slowDown := proxiedShare(t, d)
	want := bytes.Repeat([]byte("cached "), 1000)
	os.WriteFile(filepath.Join(root, "h.h"), want, 0o644)
	v, c := newFS(t, d)
	v.opts.Consistency = consistency.Consistency{Mode: consistency.ModeWindow, Period: time.Hour}
	ctx := context.Background()
	read := func() *Handle {
		h, err := v.Open(ctx, "/uva/alpha/h.h", syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the background open is under way
		got := make([]byte, len(want))
		if n, err := h.Read(ctx, got, 0); err != nil || !bytes.Equal(got[:n], want) {
			t.Fatalf("read %d bytes, %v", n, err)
		}
		return h
	}
	read().Release(ctx)

	// From now on every round trip to the share takes half a second.
	slowDown(c, "/uva/alpha/h.h", 500*time.Millisecond)
	h := read()
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Getattr(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.opening:
		t.Error("the read, flush and stat of cached data waited for the share's open")
	default:
	}
	h.Release(ctx)
}

// Connect sets up the poll session before use: what is fetched right
// after it is not fetched again.
func TestConnectBeforeUse(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	os.WriteFile(filepath.Join(root, "s.c"), []byte("x"), 0o644)
	v, c := newFSWith(t, d, client.Options{Streams: 1, Session: "connect-test"},
		Options{Consistency: consistency.Consistency{Mode: consistency.ModePoll, Period: time.Minute}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v.Connect(ctx)
	before := c.Counts()
	for range 3 {
		if _, err := v.GetAttr(ctx, "/uva/alpha/s.c"); err != nil {
			t.Fatal(err)
		}
	}
	if got := rpcsSince(c.Counts(), before); got["getattr"] != 1 || got["getinv"] != 0 {
		t.Errorf("three stats after Connect made %v; want one getattr", got)
	}
}
