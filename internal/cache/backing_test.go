package cache

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fill caches the whole of r as version ver of key.
func fill(t *testing.T, c *Cache, key string, ver uint64, r *remote) {
	t.Helper()
	c.Validate(key, ver, int64(len(r.Data)), "/d/"+key)
	got := make([]byte, len(r.Data))
	if _, err := c.ReadAt(context.Background(), key, got, 0, r.Fetch); err != nil && err != io.EOF {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, f *os.File) []byte {
	t.Helper()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBackingIsTheWholeVersion: a new version gets a new data file while
// the backing keeps reading the old one, and blocks of a backed file are
// never evicted. That a backing is given out only for a file held whole,
// and reads exactly the file, is the suite's (TestSuite).
func TestBackingIsTheWholeVersion(t *testing.T) {
	const bs = 4096
	c := open(t, t.TempDir(), Options{BlockSize: bs, DiskBytes: 5 * bs, MemoryBytes: bs})
	r := &remote{Data: make([]byte, 3*bs+100)}
	rand.Read(r.Data)
	fill(t, c, "f", 1, r)
	f, gen, ok := c.Backing("f", 1, -1)
	if !ok {
		t.Fatal("no backing for a file cached whole")
	}
	defer f.Close()

	// Another file needs more room than is left: the backed one keeps
	// its blocks.
	other := &remote{Data: make([]byte, 3*bs)}
	rand.Read(other.Data)
	fill(t, c, "g", 1, other)
	c.Sync()
	if !bytes.Equal(readAll(t, f), r.Data) {
		t.Fatal("eviction punched the data file under a backing")
	}

	// A new version: the backing keeps the old bytes, the cache the new.
	v2 := &remote{Data: bytes.Repeat([]byte("2"), 2*bs)}
	fill(t, c, "f", 2, v2)
	c.Sync()
	if !bytes.Equal(readAll(t, f), r.Data) {
		t.Fatal("a new version changed the data file under a backing")
	}
	f2, gen2, ok := c.Backing("f", 2, -1)
	if !ok {
		t.Fatal("no backing for the new version")
	}
	defer f2.Close()
	if gen2 == gen || !bytes.Equal(readAll(t, f2), v2.Data) {
		t.Fatalf("the new version's backing (gen %d, was %d) does not read it", gen2, gen)
	}
	c.Unback("f", gen)
	c.Unback("f", gen2)
}

// TestBackingChecksBlocksAfterRestart: blocks found on disk at start are
// checked before the kernel may read them directly; a bad one is dropped.
func TestBackingChecksBlocksAfterRestart(t *testing.T) {
	const bs = 4096
	dir := t.TempDir()
	c, err := Open(Options{Dir: dir, BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	r := &remote{Data: make([]byte, 3*bs)}
	rand.Read(r.Data)
	fill(t, c, "f", 1, r)
	c.Sync()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	df, err := os.OpenFile(dataFile(dir, "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	df.WriteAt([]byte("garbage"), bs+10)
	df.Close()
	c2 := open(t, dir, Options{BlockSize: bs})
	if _, _, ok := c2.Backing("f", 1, 2*bs); ok {
		t.Fatal("a backing over blocks not checked since the start")
	}
	if c2.Stats().BadBlocks != 0 {
		t.Fatal("a backing checked more blocks than it was allowed")
	}
	if _, _, ok := c2.Backing("f", 1, -1); ok {
		t.Fatal("a backing over a block that fails its checksum")
	}
	if c2.Stats().BadBlocks != 1 || c2.Present("f", 1) {
		t.Fatal("the bad block was not dropped")
	}
	fill(t, c2, "f", 1, r)
	backingReads(t, c2, "f", 1, r.Data, "once the bad block was fetched again")
}

// backingReads checks that key has a backing for ver (when says when)
// and that it reads want.
func backingReads(t *testing.T, c *Cache, key string, ver uint64, want []byte, when string) {
	t.Helper()
	f, gen, ok := c.Backing(key, ver, -1)
	if !ok {
		t.Fatal("no backing " + when)
	}
	defer c.Unback(key, gen)
	defer f.Close()
	if !bytes.Equal(readAll(t, f), want) {
		t.Fatal("the backing does not read the file")
	}
}

func dataFile(dir, key string) string {
	c := &Cache{opts: Options{Dir: dir}}
	return c.dataPath(key)
}

// Preload loads a file only while no read comes through the cache, and a
// newer Preload ends an older one.
func TestPreloadGivesWay(t *testing.T) {
	const bs = 4096
	c := open(t, t.TempDir(), Options{BlockSize: bs})
	r := &remote{Data: make([]byte, 8*bs)}
	rand.Read(r.Data)
	c.Validate("f", 1, int64(len(r.Data)), "/d/f")
	fill(t, c, "f", 1, r)

	// Reads keep coming: the preload waits.
	done := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(done)
		p := make([]byte, 10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			c.ReadAt(context.Background(), "f", p, 0, r.Fetch)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	loaded := make(chan struct{})
	go func() { c.Preload("f", 1); close(loaded) }()
	time.Sleep(3 * preloadIdle)
	if n := c.Stats().Preloaded; n != 0 {
		t.Fatalf("preloaded %d bytes while reads kept coming", n)
	}
	// A newer preload ends it; that one runs once the reads stop.
	loaded2 := make(chan struct{})
	go func() {
		for {
			c.preMu.Lock()
			started := c.preStop != nil
			c.preMu.Unlock()
			if started {
				break
			}
			time.Sleep(time.Millisecond)
		}
		c.Preload("f", 1)
		close(loaded2)
	}()
	select {
	case <-loaded:
	case <-time.After(5 * time.Second):
		t.Fatal("an older preload did not give way to a newer one")
	}
	close(stop)
	<-done
	select {
	case <-loaded2:
	case <-time.After(5 * time.Second):
		t.Fatal("a preload did not finish once reads stopped")
	}
	if n := c.Stats().Preloaded; n != int64(len(r.Data)) {
		t.Fatalf("preloaded %d bytes; want %d", n, len(r.Data))
	}
	// A version the cache does not hold whole is not loaded.
	c.Preload("f", 2)
	if n := c.Stats().Preloaded; n != int64(len(r.Data)) {
		t.Fatalf("preloaded %d bytes after a preload of a version not cached", n-int64(len(r.Data)))
	}
}

// The blocks of a large file that the kernel will not read from the data
// file (larger than Preload would load), or that the writer is behind on,
// go to its data file around the page cache; read back from disk (the
// memory layer off), they are the bytes fetched, and a backing reads the
// whole file.
func TestLargeFileDirectWrites(t *testing.T) {
	t.Run("not preloaded", func(t *testing.T) { largeFileDirectWrites(t, func(c *Cache) { c.preloadMax = directMin }) })
	t.Run("writer behind", func(t *testing.T) { largeFileDirectWrites(t, func(c *Cache) { c.behind = -1 }) })
}

func largeFileDirectWrites(t *testing.T, set func(*Cache)) {
	const bs = 1 << 20
	c := open(t, t.TempDir(), Options{BlockSize: bs, MemoryBytes: -1})
	set(c)
	r := &remote{Data: make([]byte, directMin+bs/2)}
	rand.Read(r.Data)
	fill(t, c, "f", 1, r)
	c.Sync()
	if c.noDirect.Load() {
		t.Log("the test directory's file system has no O_DIRECT: blocks went through the page cache")
	} else if n := resident(t, c.dataPath("f")); n > len(r.Data)/8 {
		t.Errorf("%d of %d bytes of the data file are in the page cache after direct writes", n, len(r.Data))
	}
	got := make([]byte, len(r.Data))
	if _, err := c.ReadAt(context.Background(), "f", got, 0, r.Fetch); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if !bytes.Equal(got, r.Data) {
		t.Fatal("blocks read back from disk differ")
	}
	if st := c.Stats(); st.BadBlocks != 0 {
		t.Fatalf("%d blocks failed their checksum", st.BadBlocks)
	}
	backingReads(t, c, "f", 1, r.Data, "for a file cached whole")
}

// The blocks of a large file that the cache can hold whole, and that
// Preload would load, go to its data file through the page cache: the
// next open reads the data file directly (passthrough), typically at once,
// and must find it in memory, not on disk. The data file is in the page
// cache once its blocks are written, and a backing reads the bytes
// fetched.
func TestHeldFileWritesThroughPageCache(t *testing.T) {
	const bs = 1 << 20
	c := open(t, t.TempDir(), Options{BlockSize: bs, MemoryBytes: -1, DiskBytes: 1 << 30})
	c.behind = 1 << 20 // however far the writer falls behind this test's reader
	r := &remote{Data: make([]byte, directMin+3*bs+bs/3)}
	rand.Read(r.Data)
	if !c.Holds(int64(len(r.Data))) || int64(len(r.Data)) > c.preloadMax {
		t.Fatalf("a %d-byte file should be one the cache holds whole and preloads (preload bound %d)", len(r.Data), c.preloadMax)
	}
	fill(t, c, "f", 1, r)
	c.Sync()
	if n := resident(t, c.dataPath("f")); n < len(r.Data)*7/8 {
		t.Errorf("%d of %d bytes of the data file are in the page cache once written; the next open would read the rest from disk", n, len(r.Data))
	}
	if st := c.Stats(); st.Preloaded != 0 {
		t.Fatalf("%d bytes preloaded: the test is about the writes", st.Preloaded)
	}
	backingReads(t, c, "f", 1, r.Data, "for a file cached whole")
}

// resident counts the bytes of the file at p held in the page cache.
func resident(t *testing.T, p string) int {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	return residentPages(t, m) * os.Getpagesize()
}
