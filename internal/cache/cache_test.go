package cache

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"sync"
	"testing"

	"pando.dev/pando/internal/blockcache"
	"pando.dev/pando/internal/blockcache/cachetest"
)

// remote is the far side of a cache in these tests.
type remote = cachetest.Remote

func open(t *testing.T, dir string, opts Options) *Cache {
	t.Helper()
	opts.Dir = dir
	c, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCorruptBlockIsRefetchedNeverServed(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir, Options{BlockSize: 4096, MemoryBytes: -1})
	r := &remote{Data: make([]byte, 3*4096+100)}
	rand.Read(r.Data)
	c.Validate("f", 1, int64(len(r.Data)), "/d/f")
	got := make([]byte, len(r.Data))
	if _, err := c.ReadAt(context.Background(), "f", got, 0, r.Fetch); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	c.Sync()
	c.mem = newMemLRU(0) // read back from disk, not memory
	// Flip bytes of block 1 on disk.
	f, err := os.OpenFile(c.dataPath("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("garbage"), 4096+10)
	f.Close()
	before := r.Fetches.Load()
	clear(got)
	if _, err := c.ReadAt(context.Background(), "f", got, 0, r.Fetch); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if !bytes.Equal(got, r.Data) {
		t.Fatal("a corrupted block was served")
	}
	if st := c.Stats(); st.BadBlocks != 1 || r.Fetches.Load() != before+1 {
		t.Fatalf("bad blocks %d, refetches %d; want 1 and 1", st.BadBlocks, r.Fetches.Load()-before)
	}
}

func TestConcurrentReadersFetchOnce(t *testing.T) {
	c := open(t, t.TempDir(), Options{BlockSize: 1 << 16})
	r := &remote{Data: make([]byte, 1<<16), Gate: make(chan struct{})}
	rand.Read(r.Data)
	c.Validate("f", 1, int64(len(r.Data)), "")
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]byte, 1000)
			if _, err := c.ReadAt(context.Background(), "f", b, 5000, r.Fetch); err != nil {
				t.Error(err)
			}
			if !bytes.Equal(b, r.Data[5000:6000]) {
				t.Error("wrong data")
			}
		}()
	}
	for r.Fetches.Load() == 0 {
		// wait until the first reader is inside the fetcher
	}
	close(r.Gate)
	wg.Wait()
	if n := r.Fetches.Load(); n != 1 {
		t.Fatalf("16 concurrent readers of a cold block caused %d fetches", n)
	}
}

// TestPrefetchLeavesABlockInFlightToItsFetch: read-ahead does not wait
// for a block another caller is already fetching (it would hold one of its
// slots for nothing), and causes no second fetch.
func TestPrefetchLeavesABlockInFlightToItsFetch(t *testing.T) {
	c := open(t, t.TempDir(), Options{BlockSize: 1 << 16})
	r := &remote{Data: make([]byte, 1<<16), Gate: make(chan struct{})}
	rand.Read(r.Data)
	c.Validate("f", 1, int64(len(r.Data)), "")
	done := make(chan error, 1)
	go func() {
		_, err := c.ReadAt(context.Background(), "f", make([]byte, 10), 0, r.Fetch)
		done <- err
	}()
	for r.Fetches.Load() == 0 {
		// wait until the reader is inside the fetcher
	}
	if err := c.Prefetch(context.Background(), "f", 0, r.Fetch); err != nil {
		t.Fatal(err)
	}
	close(r.Gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := r.Fetches.Load(); n != 1 {
		t.Fatalf("a read and a prefetch of the same cold block caused %d fetches", n)
	}
}

func TestPersistsAcrossRestartIncludingDirtyData(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(Options{Dir: dir, BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	r := &remote{Data: bytes.Repeat([]byte("x"), 10000)}
	ctx := context.Background()
	c.Validate("f", 7, int64(len(r.Data)), "/d/f")
	buf := make([]byte, 10000)
	c.ReadAt(ctx, "f", buf, 0, r.Fetch)
	c.Sync()
	if err := c.WriteAt(ctx, "f", []byte("dirty"), 9998, r.Fetch); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := open(t, dir, Options{BlockSize: 4096})
	if v, size, ok := c2.Version("f"); !ok || v != 7 || size != 10003 {
		t.Fatalf("after reopen: version %d size %d ok %v", v, size, ok)
	}
	if d := c2.Dirty("f"); len(d) != 1 || d[0] != (Range{Off: 9998, Len: 5}) {
		t.Fatalf("dirty ranges after reopen: %v", d)
	}
	before := r.Fetches.Load()
	got := make([]byte, 10003)
	n, _ := c2.ReadAt(ctx, "f", got, 0, r.Fetch)
	if n != 10003 || string(got[9998:]) != "dirty" || r.Fetches.Load() != before {
		t.Fatalf("after reopen: read %d bytes, %d fetches, tail %q", n, r.Fetches.Load()-before, got[9998:])
	}
	// A new remote version drops clean data but keeps dirty ranges.
	c2.Validate("f", 8, 10000, "")
	if d := c2.Dirty("f"); len(d) != 1 {
		t.Fatalf("a version change dropped unsent data: %v", d)
	}
}

func TestEvictionBound(t *testing.T) {
	c := open(t, t.TempDir(), Options{BlockSize: 4096, DiskBytes: 5 * 4096, MemoryBytes: 4096})
	ctx := context.Background()
	for i := range 4 {
		key := string(rune('a' + i))
		r := &remote{Data: make([]byte, 3*4096)}
		rand.Read(r.Data)
		c.Validate(key, 1, int64(len(r.Data)), "")
		got := make([]byte, len(r.Data))
		if _, err := c.ReadAt(ctx, key, got, 0, r.Fetch); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if !bytes.Equal(got, r.Data) {
			t.Fatalf("file %s: wrong data", key)
		}
		c.Sync()
		if st := c.Stats(); st.DiskBytes > 5*4096 {
			t.Fatalf("disk use %d over the bound", st.DiskBytes)
		}
	}
	if c.Stats().Evictions == 0 {
		t.Fatal("no evictions")
	}
}

// TestWritesRacingStagedBlocksKeepTheWrittenData: reads that fetch blocks
// (which the disk writer then writes behind them) race with writes of the
// same blocks and with a truncate; what the cache holds afterwards, read
// back from disk, is what was written last.
func TestWritesRacingStagedBlocksKeepTheWrittenData(t *testing.T) {
	const bs, nblocks, keep = 4096, 8, 6
	ctx := context.Background()
	for round := range 20 {
		c := open(t, t.TempDir(), Options{BlockSize: bs, MemoryBytes: -1})
		r := &remote{Data: make([]byte, nblocks*bs)}
		rand.Read(r.Data)
		c.Validate("f", 1, int64(len(r.Data)), "")
		want := append([]byte(nil), r.Data[:keep*bs]...)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 4 * nblocks {
				c.ReadAt(ctx, "f", make([]byte, bs), int64(i%nblocks)*bs, r.Fetch)
			}
		}()
		go func() {
			defer wg.Done()
			for i := range 2 * keep {
				if i == keep {
					// The blocks past the cut go, staged ones too.
					if err := c.Truncate("f", keep*bs); err != nil {
						t.Error(err)
					}
				}
				idx := (i*5 + round) % keep
				b := make([]byte, bs)
				rand.Read(b)
				if err := c.WriteAt(ctx, "f", b, int64(idx)*bs, r.Fetch); err != nil {
					t.Error(err)
				}
				copy(want[idx*bs:], b)
			}
		}()
		wg.Wait()
		c.Sync()
		got := make([]byte, len(want))
		if n, err := c.ReadAt(ctx, "f", got, 0, r.Fetch); n != len(want) || err != nil && err != io.EOF {
			t.Fatal(n, err)
		}
		for i := range keep {
			if !bytes.Equal(got[i*bs:(i+1)*bs], want[i*bs:(i+1)*bs]) {
				t.Errorf("round %d: block %d differs from what was written", round, i)
			}
		}
		if st := c.Stats(); st.BadBlocks != 0 || st.DiskBytes > keep*bs {
			t.Errorf("round %d: %d cached blocks failed their checksum, %d bytes on disk", round, st.BadBlocks, st.DiskBytes)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
}

// A block's CRC32C reported by its fetcher (the sum it was checked
// against on the wire) is the one the cache records: a wrong one makes the
// block fail its check when it is read back from disk, and it is fetched
// again, never served; a right one spares the cache a pass over the block.
func TestReportedSumIsRecorded(t *testing.T) {
	for _, lie := range []bool{false, true} {
		c := open(t, t.TempDir(), Options{BlockSize: 4096, MemoryBytes: -1})
		r := &remote{Data: make([]byte, 2*4096)}
		rand.Read(r.Data)
		fetch := func(ctx context.Context, p []byte, off int64) (int, error) {
			n, err := r.Fetch(ctx, p, off)
			sum := crc(p[:n])
			if lie {
				sum ^= 1
			}
			blockcache.ReportSum(ctx, n, sum)
			return n, err
		}
		c.Validate("f", 1, int64(len(r.Data)), "/d/f")
		got := make([]byte, len(r.Data))
		if _, err := c.ReadAt(context.Background(), "f", got, 0, fetch); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		c.Sync()
		before := r.Fetches.Load()
		clear(got)
		if _, err := c.ReadAt(context.Background(), "f", got, 0, fetch); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if !bytes.Equal(got, r.Data) {
			t.Fatalf("lie=%v: wrong bytes served", lie)
		}
		want := int64(0)
		if lie {
			want = 2
		}
		if st := c.Stats(); st.BadBlocks != want || r.Fetches.Load()-before != want {
			t.Fatalf("lie=%v: bad blocks %d, refetches %d; want %d and %d", lie, st.BadBlocks, r.Fetches.Load()-before, want, want)
		}
	}
}

func init() { poisonFreed = true }
