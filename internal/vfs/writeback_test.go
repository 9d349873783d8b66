package vfs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/wan"
	"pando.dev/pando/internal/wire"
)

// newFS starts a file system over d's namespace with its own cache.
func newFS(t *testing.T, d *testenv.Domain) (*FS, *client.Client) {
	return newFSWith(t, d, client.Options{Streams: 1}, Options{})
}

// newFSWith is newFS with the client's and the file system's options.
func newFSWith(t *testing.T, d *testenv.Domain, co client.Options, o Options) (*FS, *client.Client) {
	t.Helper()
	c, err := client.New(d.Admin, co)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ch, err := cache.Open(cache.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	v := New(c, client.Data(c), ch, o)
	t.Cleanup(v.Close)
	return v, c
}

// pattern returns n bytes that differ from block to block.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i/7) ^ seed ^ byte(i>>20)
	}
	return b
}

// writeScattered writes three ranges with holes between them, neither
// block- nor request-aligned, several MiB each, into h and into want.
func writeScattered(t *testing.T, h *Handle, want []byte) {
	t.Helper()
	ctx := context.Background()
	for i, r := range []struct{ off, n int }{{100, 9<<20 + 5}, {12<<20 + 3, 3 << 20}, {17 << 20, 6<<20 + 11}} {
		p := pattern(r.n, byte(i+1))
		for lo := 0; lo < len(p); lo += 128 << 10 { // as the kernel sends them
			hi := min(lo+128<<10, len(p))
			if _, err := h.Write(ctx, p[lo:hi], int64(r.off+lo)); err != nil {
				t.Fatal(err)
			}
		}
		copy(want[r.off:], p)
	}
}

// TestWriteBackSendsRangesInFlight: a flush sends every dirty range (many
// blocks in flight), leaves nothing dirty, and takes the file's new
// attributes from the write replies instead of asking for them.
func TestWriteBackSendsRangesInFlight(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	v, c := newFS(t, d)
	ctx := context.Background()
	h, _, err := v.Create(ctx, "/uva/alpha/f", syscall.O_RDWR|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 17<<20+6<<20+11)
	writeScattered(t, h, want)
	before := c.Counts()[wire.OpFGetAttr.String()]
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.Counts()[wire.OpFGetAttr.String()] - before; n != 0 {
		t.Errorf("the flush asked for the attributes %d times; the write replies carry them", n)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); !bytes.Equal(got, want) {
		t.Fatalf("the share holds %d bytes, not the %d written", len(got), len(want))
	}
	if r := v.cache.Dirty(h.key); len(r) != 0 {
		t.Errorf("still dirty after the flush: %v", r)
	}
	a, err := h.remote.Stat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ver, size, _ := v.cache.Version(h.key); ver != a.Version || size != a.Size {
		t.Errorf("the cache holds version %d size %d, the share %d and %d", ver, size, a.Version, a.Size)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWriteBackFailureKeepsData: when the link to the share breaks in the
// middle of a flush, the flush fails naming the file, every byte stays
// dirty in the cache, and the next flush sends it all.
func TestWriteBackFailureKeepsData(t *testing.T) {
	d := testenv.New(t, "uva")
	shareAddr, proxyAddr := testenv.FreePort(t), testenv.FreePort(t)
	link := wan.Config{RTT: 20 * time.Millisecond, Rate: 50e6}
	px, err := wan.Listen(proxyAddr, shareAddr, link)
	if err != nil {
		t.Fatal(err)
	}
	root := d.AddShareAt("alpha", shareAddr, proxyAddr)
	v, _ := newFS(t, d)
	ctx := context.Background()
	h, _, err := v.Create(ctx, "/uva/alpha/f", syscall.O_RDWR|syscall.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 17<<20+6<<20+11)
	writeScattered(t, h, want)
	dirty := v.cache.Dirty(h.key)

	// 23 MiB at 50 Mbit/s take about 4 s: cut the link well before.
	time.AfterFunc(500*time.Millisecond, func() { px.Close() })
	err = h.Flush(ctx)
	if err == nil {
		t.Fatal("the flush succeeded although the link broke")
	}
	if !strings.Contains(err.Error(), "/uva/alpha/f") {
		t.Errorf("the error does not name the file: %v", err)
	}
	if got := v.cache.Dirty(h.key); len(got) != len(dirty) || got[0] != dirty[0] || got[len(got)-1] != dirty[len(dirty)-1] {
		t.Fatalf("dirty ranges %v after the failure, %v before", got, dirty)
	}

	px2, err := wan.Listen(proxyAddr, shareAddr, wan.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px2.Close() })
	// The share handle went with the broken connection: as with close(2)
	// in the mount, the next open and close of the file sends the data.
	h.Release(ctx)
	if got := v.cache.Dirty(h.key); len(got) != len(dirty) {
		t.Fatalf("dirty ranges %v after the release, %v before", got, dirty)
	}
	g, err := v.Open(ctx, "/uva/alpha/f", syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatalf("close after the link came back: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); !bytes.Equal(got, want) {
		t.Fatalf("the share holds %d bytes, not the %d written", len(got), len(want))
	}
	if r := v.cache.Dirty(h.key); len(r) != 0 {
		t.Errorf("still dirty after the close: %v", r)
	}
}
