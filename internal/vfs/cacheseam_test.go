package vfs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"pando.dev/pando/internal/blockcache"
	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/testenv"
)

// spyCache is a decorator of a block cache, as the vfs can be given one:
// it counts the reads the vfs makes of the cache, and fails writes with
// ENOSPC (a full disk) once told to.
type spyCache struct {
	blockcache.Cache
	reads      atomic.Int64
	failWrites atomic.Bool
}

func (c *spyCache) ReadAt(ctx context.Context, key string, p []byte, off int64, fetch blockcache.Fetcher) (int, error) {
	c.reads.Add(1)
	return c.Cache.ReadAt(ctx, key, p, off, fetch)
}

func (c *spyCache) Slice(ctx context.Context, key string, off int64, n int, fetch blockcache.Fetcher) ([]byte, func(), bool, error) {
	c.reads.Add(1)
	return c.Cache.Slice(ctx, key, off, n, fetch)
}

func (c *spyCache) WriteAt(ctx context.Context, key string, p []byte, off int64, fetch blockcache.Fetcher) error {
	if c.failWrites.Load() {
		return syscall.ENOSPC
	}
	return c.Cache.WriteAt(ctx, key, p, off, fetch)
}

// TestCacheSeam: the vfs holds its block cache only through
// blockcache.Cache, so a decorator of it sees the vfs's reads, and a write
// the cache fails fails the write(2) with the cache's error, leaving the
// share's file as it was.
func TestCacheSeam(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	original := bytes.Repeat([]byte("seam "), 1000)
	if err := os.WriteFile(filepath.Join(root, "f"), original, 0o644); err != nil {
		t.Fatal(err)
	}
	ch, err := cache.Open(cache.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	spy := &spyCache{Cache: ch}
	c := d.Client(d.Admin)
	v := New(c, client.Data(c), spy, Options{})
	t.Cleanup(v.Close)
	ctx := context.Background()
	const p = "/uva/alpha/f"

	if got := readAll(t, v, p); !bytes.Equal(got, original) {
		t.Fatalf("read through the decorated cache: %d bytes, not the share's", len(got))
	}
	if spy.reads.Load() == 0 {
		t.Fatal("the vfs read the file without going through the cache it was given")
	}

	spy.failWrites.Store(true)
	h, err := v.Open(ctx, p, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write(ctx, []byte("LOST"), 0); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write the cache failed with ENOSPC returned %v", err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("close after the failed write: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); !bytes.Equal(got, original) {
		t.Fatal("the share's file changed though the write failed")
	}
	if ch.Unsent(mustKey(t, v, p)) {
		t.Fatal("the cache holds unsent data of a write that failed")
	}
}

// mustKey is the cache key of p.
func mustKey(t *testing.T, v *FS, p string) string {
	t.Helper()
	ctx := context.Background()
	a, err := v.GetAttr(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	k, err := v.Key(ctx, p, a)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
