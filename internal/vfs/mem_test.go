package vfs

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"path"
	"sync"
	"syscall"
	"testing"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/remote/memory"
	"pando.dev/pando/internal/wire"
)

// newMemFS makes a file system with options o over an in-memory tree that
// mounts the share alpha at /uva/alpha, and counts its namespace's
// requests: the tests that need no real share use it.
func newMemFS(t *testing.T, o Options) (*FS, *memory.Tree, *countingNS) {
	t.Helper()
	tr := memory.New("alice@uva", wire.MountEntry{Prefix: "/uva/alpha", Share: "alpha"})
	ch, err := cache.Open(cache.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	ns := &countingNS{Namespace: tr, n: make(map[string]uint64)}
	v := New(ns, tr, ch, o)
	t.Cleanup(v.Close)
	return v, tr, ns
}

// countingNS is a decorator of a namespace that counts its attribute and
// listing requests, by the names client.Counts gives them.
type countingNS struct {
	remote.Namespace
	mu sync.Mutex
	n  map[string]uint64
}

func (c *countingNS) count(op string) {
	c.mu.Lock()
	c.n[op]++
	c.mu.Unlock()
}

// Counts returns the requests counted so far, by kind.
func (c *countingNS) Counts() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

func (c *countingNS) Stat(ctx context.Context, p string) (wire.Attr, error) {
	c.count("getattr")
	return c.Namespace.Stat(ctx, p)
}

func (c *countingNS) ReadDirData(ctx context.Context, p string, fileMax, budget uint32) ([]wire.DirEntry, wire.Attr, map[string][]byte, error) {
	c.count("readdir")
	return c.Namespace.ReadDirData(ctx, p, fileMax, budget)
}

func (c *countingNS) ReadDirPage(ctx context.Context, p, after string, max uint32) ([]wire.DirEntry, bool, error) {
	c.count("readdir")
	return c.Namespace.ReadDirPage(ctx, p, after, max)
}

// memWalkTree is walkTree in an in-memory tree, under /uva/alpha/t.
func memWalkTree(t *testing.T, tr *memory.Tree, files int) (dirs int) {
	t.Helper()
	ctx := context.Background()
	all := []string{"/uva/alpha/t"}
	for i := range 3 {
		d := path.Join("/uva/alpha/t", fmt.Sprint("d", i))
		all = append(all, d)
		for j := range 2 {
			all = append(all, path.Join(d, fmt.Sprint("e", j)))
		}
	}
	for _, d := range all {
		if _, err := tr.Mkdir(ctx, d, 0o755); err != nil {
			t.Fatal(err)
		}
		for k := range files {
			memWrite(t, tr, path.Join(d, fmt.Sprint("f", k, ".c")), []byte("int x;\n"))
		}
	}
	return len(all)
}

// memWrite makes (or replaces the contents of) the file p in tr.
func memWrite(t *testing.T, tr *memory.Tree, p string, data []byte) {
	t.Helper()
	ctx := context.Background()
	f, err := tr.Create(ctx, p, wire.OpenWrite|wire.OpenTrunc, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	if _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
}

// What the vfs writes reaches the share, and what changes at the share
// is what the vfs reads next under strict consistency.
func TestReadWriteThroughTheSeam(t *testing.T) {
	v, tr, _ := newMemFS(t, Options{Consistency: consistency.Consistency{Mode: consistency.ModeStrict}})
	ctx := t.Context()
	const p = "/uva/alpha/f"
	h, _, err := v.Create(ctx, p, syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write(ctx, []byte("written here"), 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := tr.Open(ctx, p, wire.OpenRead)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := f.ReadAt(ctx, buf, 0)
	f.Close(ctx)
	if string(buf[:n]) != "written here" {
		t.Fatalf("the share holds %q after the close", buf[:n])
	}

	memWrite(t, tr, p, []byte("changed at the share"))
	h, err = v.Open(ctx, p, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	n, err = h.Read(ctx, buf, 0)
	if !bytes.Equal(buf[:n], []byte("changed at the share")) {
		t.Fatalf("read %q (%v) after a change at the share, want its new contents", buf[:n], err)
	}
}
