package cache

import (
	"bytes"
	"context"
	"io"
	"testing"
)

// TestRevertDropsRefusedData: data the share refused leaves the cache at
// once, with the blocks it was written into: reads see the share's bytes
// again (fetched anew), and a cache opened again finds nothing dirty.
func TestRevertDropsRefusedData(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(Options{Dir: dir, BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	r := &remote{Data: bytes.Repeat([]byte("s"), 10000)}
	ctx := context.Background()
	c.Validate("f", 7, int64(len(r.Data)), "/d/f")
	buf := make([]byte, 10000)
	if _, err := c.ReadAt(ctx, "f", buf, 0, r.Fetch); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	c.Sync()
	if err := c.WriteAt(ctx, "f", []byte("REFUSED"), 9998, r.Fetch); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteAt(ctx, "f", []byte("REFUSED"), 10, r.Fetch); err != nil {
		t.Fatal(err)
	}
	if err := c.Revert("f", 7, 10000); err != nil {
		t.Fatal(err)
	}
	if d := c.Dirty("f"); len(d) != 0 {
		t.Fatalf("dirty ranges after Revert: %v", d)
	}
	if v, size, ok := c.Version("f"); !ok || v != 7 || size != 10000 {
		t.Fatalf("after Revert: version %d size %d ok %v", v, size, ok)
	}
	before := r.Fetches.Load()
	got := make([]byte, 10010)
	n, _ := c.ReadAt(ctx, "f", got, 0, r.Fetch)
	if n != 10000 || !bytes.Equal(got[:n], r.Data) {
		t.Fatalf("read after Revert: %d bytes, not the share's: %q", n, got[:n])
	}
	if r.Fetches.Load() == before {
		t.Fatal("read after Revert served blocks the refused data was written into without fetching them")
	}
	// Whatever the index had flushed before, it holds no dirty data now.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := open(t, dir, Options{BlockSize: 4096})
	if d := c2.Dirty("f"); len(d) != 0 {
		t.Fatalf("the refused data came back with the cache: %v", d)
	}
	if keys := c2.DirtyKeys(); len(keys) != 0 {
		t.Fatalf("dirty files after reopen: %v", keys)
	}
}
