// Package cachetest is the conformance suite every blockcache.Cache
// passes: it drives a cache through the interface alone and checks what
// the contracts in package blockcache promise.
package cachetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pando.dev/pando/internal/blockcache"
)

// Open opens the cache kept in dir: a new one in an empty directory, and
// the one an earlier Open of dir closed otherwise.
type Open func(t *testing.T, dir string) blockcache.Cache

// Remote is a file at a share, for tests of a cache: its bytes, and the
// fetches of them.
type Remote struct {
	Data    []byte
	Fetches atomic.Int64
	Gate    chan struct{} // if set, fetches wait until it is closed
	Fail    bool          // every fetch fails: the share is away
}

// Fetch is a blockcache.Fetcher of r's bytes.
func (r *Remote) Fetch(ctx context.Context, p []byte, off int64) (int, error) {
	r.Fetches.Add(1)
	if r.Gate != nil {
		<-r.Gate
	}
	if r.Fail {
		return 0, errors.New("the share is away")
	}
	if off >= int64(len(r.Data)) {
		return 0, io.EOF
	}
	n := copy(p, r.Data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i%251)
	}
	return b
}

// fresh opens a cache in a new directory, closed at the end of the test.
func fresh(t *testing.T, open Open) blockcache.Cache {
	c := open(t, t.TempDir())
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c
}

func readAll(t *testing.T, c blockcache.Cache, key string, size int, fetch blockcache.Fetcher) []byte {
	t.Helper()
	got := make([]byte, size)
	n, err := c.ReadAt(context.Background(), key, got, 0, fetch)
	if err != nil && err != io.EOF {
		t.Fatalf("read of %s: %v", key, err)
	}
	return got[:n]
}

// Run runs the suite against caches made by open.
func Run(t *testing.T, open Open) {
	ctx := context.Background()

	t.Run("ReadFetchesEachMissOnce", func(t *testing.T) {
		c := fresh(t, open)
		bs := c.BlockSize()
		r := &Remote{Data: pattern(int(3*bs+10), 1)}
		c.Validate("f", 1, int64(len(r.Data)), "/d/f")
		if c.Present("f", 0) {
			t.Fatal("a block is present before any read")
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				got := make([]byte, 100)
				if n, err := c.ReadAt(ctx, "f", got, bs+5, r.Fetch); n != 100 || err != nil || !bytes.Equal(got, r.Data[bs+5:bs+105]) {
					t.Errorf("concurrent read: %d bytes, %v", n, err)
				}
			})
		}
		wg.Wait()
		if n := r.Fetches.Load(); n != 1 {
			t.Fatalf("8 concurrent misses of one block called the fetcher %d times", n)
		}
		if !c.Present("f", 1) || c.Present("f", 0) {
			t.Fatal("Present does not say which block was read")
		}
		if got := readAll(t, c, "f", len(r.Data)+50, r.Fetch); !bytes.Equal(got, r.Data) {
			t.Fatalf("whole read: %d bytes, want %d as at the share", len(got), len(r.Data))
		}
		before := r.Fetches.Load()
		readAll(t, c, "f", len(r.Data), r.Fetch)
		if r.Fetches.Load() != before {
			t.Fatal("a read of cached blocks called the fetcher")
		}
		if n, err := c.ReadAt(ctx, "f", make([]byte, 10), int64(len(r.Data)), r.Fetch); n != 0 || err != io.EOF {
			t.Fatalf("a read at the end: %d bytes, %v; want 0, io.EOF", n, err)
		}
		b, release, ok, err := c.Slice(ctx, "f", bs+1, 10, r.Fetch)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if !bytes.Equal(b, r.Data[bs+1:bs+11]) {
				t.Fatalf("Slice gave %q", b)
			}
			release()
		}
	})

	t.Run("PrefetchFillsABlock", func(t *testing.T) {
		c := fresh(t, open)
		r := &Remote{Data: pattern(int(2*c.BlockSize()), 2)}
		c.Validate("f", 1, int64(len(r.Data)), "/d/f")
		if err := c.Prefetch(ctx, "f", 1, r.Fetch); err != nil {
			t.Fatal(err)
		}
		if !c.Present("f", 1) {
			t.Fatal("a prefetched block is not present")
		}
	})

	t.Run("WritesStayDirtyUntilMarkedClean", func(t *testing.T) {
		c := fresh(t, open)
		bs := c.BlockSize()
		r := &Remote{Data: pattern(int(2*bs), 3)}
		c.Validate("f", 1, int64(len(r.Data)), "/d/f")
		if c.Unsent("f") || len(c.Dirty("f")) != 0 {
			t.Fatal("a file read nothing of is unsent")
		}
		if got := c.AddsDirty("f", 10, 5); got != bs {
			t.Fatalf("a write into a clean block adds %d dirty bytes; want the block, %d", got, bs)
		}
		if err := c.WriteAt(ctx, "f", []byte("hello"), 10, r.Fetch); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, c, "f", int(2*bs), r.Fetch); !bytes.Equal(got[:10], r.Data[:10]) || string(got[10:15]) != "hello" || !bytes.Equal(got[15:], r.Data[15:]) {
			t.Fatal("a partial write did not keep the block's other bytes")
		}
		if d := c.Dirty("f"); !slices.Equal(d, []blockcache.Range{{Off: 10, Len: 5}}) {
			t.Fatalf("dirty ranges %v; want [10, 15)", d)
		}
		if !c.Unsent("f") || c.AddsDirty("f", 20, 5) != 0 || c.DirtyBytesOf("f") != bs || c.DirtyBytes() < bs {
			t.Fatalf("after a write: unsent %v, adds %d, of the file %d, in all %d", c.Unsent("f"), c.AddsDirty("f", 20, 5), c.DirtyBytesOf("f"), c.DirtyBytes())
		}
		if keys := c.DirtyKeys(); len(keys) != 1 || keys[0].Key != "f" || keys[0].Name != "/d/f" {
			t.Fatalf("DirtyKeys = %+v; want f, named /d/f", keys)
		}
		done, mark := c.DirtyAt("f")
		if err := c.WriteAt(ctx, "f", []byte("later"), bs+7, r.Fetch); err != nil {
			t.Fatal(err)
		}
		c.MarkClean("f", done, mark, 2, 2*bs)
		if d := c.Dirty("f"); !slices.Equal(d, []blockcache.Range{{Off: bs + 7, Len: 5}}) {
			t.Fatalf("after marking the first write clean, dirty ranges %v; want the later write's", d)
		}
		if v, _, _ := c.Version("f"); v != 2 {
			t.Fatalf("version %d after MarkClean; want 2", v)
		}
		c.MarkClean("f", c.Dirty("f"), blockcache.AllWrites, 3, 2*bs)
		if c.Unsent("f") || len(c.DirtyKeys()) != 0 {
			t.Fatal("a file marked clean for all writes is still unsent")
		}
	})

	t.Run("ANewVersionDropsAFileUnlessUnsent", func(t *testing.T) {
		c := fresh(t, open)
		bs := c.BlockSize()
		r := &Remote{Data: pattern(int(2*bs), 4)}
		if !c.Validate("f", 1, int64(len(r.Data)), "/d/f") {
			t.Fatal("Validate of a file the cache knew nothing of reports data dropped")
		}
		readAll(t, c, "f", int(bs), r.Fetch)
		if !c.Validate("f", 1, int64(len(r.Data)), "/d/f") {
			t.Fatal("Validate of the version cached reports data dropped")
		}
		r.Data = pattern(int(3*bs), 5)
		if c.Validate("f", 2, int64(len(r.Data)), "/d/f") {
			t.Fatal("Validate of a new version reports the old one's data kept")
		}
		if _, size, _ := c.Version("f"); c.Present("f", 0) || size != 3*bs {
			t.Fatalf("after a new version: block of the old one present %v, size %d", c.Present("f", 0), size)
		}
		if got := readAll(t, c, "f", int(bs), r.Fetch); !bytes.Equal(got, r.Data[:bs]) {
			t.Fatal("the new version's bytes are not read")
		}

		if err := c.WriteAt(ctx, "f", []byte("mine"), bs, r.Fetch); err != nil {
			t.Fatal(err)
		}
		c.Validate("f", 3, 10, "/d/f")
		if _, size, _ := c.Version("f"); !c.Present("f", 0) || size != 3*bs {
			t.Fatalf("a new version of a file with unsent data: block 0 kept %v, size %d; want both kept", c.Present("f", 0), size)
		}
		if d := c.Dirty("f"); !slices.Equal(d, []blockcache.Range{{Off: bs, Len: 4}}) {
			t.Fatalf("a new version dropped unsent data: %v", d)
		}
		c.SetVersion("f", 4, 3*bs)
		if v, _, ok := c.Version("f"); !ok || v != 4 || !c.Present("f", 0) {
			t.Fatalf("SetVersion: version %d ok %v, block kept %v", v, ok, c.Present("f", 0))
		}
	})

	t.Run("TruncateAndCut", func(t *testing.T) {
		c := fresh(t, open)
		bs := c.BlockSize()
		r := &Remote{Data: pattern(int(2*bs), 6)}
		c.Validate("f", 1, int64(len(r.Data)), "/d/f")
		if err := c.WriteAt(ctx, "f", []byte("abcdef"), bs+1, r.Fetch); err != nil {
			t.Fatal(err)
		}
		if err := c.Truncate("f", bs+3); err != nil {
			t.Fatal(err)
		}
		if _, size, _ := c.Version("f"); size != bs+3 {
			t.Fatalf("size %d after Truncate; want %d", size, bs+3)
		}
		if d := c.Dirty("f"); !slices.Equal(d, []blockcache.Range{{Off: bs + 1, Len: 2}}) {
			t.Fatalf("dirty ranges after Truncate: %v; want the part below the cut", d)
		}
		c.MarkClean("f", c.Dirty("f"), blockcache.AllWrites, 2, bs+3)
		c.Cut("f")
		if !c.IsCut("f") || !c.Unsent("f") {
			t.Fatal("a file cut here is not unsent")
		}
		c.MarkClean("f", nil, blockcache.AllWrites, 3, bs+3)
		if c.IsCut("f") || c.Unsent("f") {
			t.Fatal("a cut file marked clean is still unsent")
		}
	})

	t.Run("HoldWritesHoldsOffWrites", func(t *testing.T) {
		c := fresh(t, open)
		r := &Remote{Data: pattern(100, 7)}
		c.Validate("f", 1, 100, "/d/f")
		release := c.HoldWrites("f")
		wrote := make(chan error, 1)
		go func() { wrote <- c.WriteAt(ctx, "f", []byte("x"), 0, r.Fetch) }()
		select {
		case err := <-wrote:
			t.Fatalf("a write went on while writes were held (%v)", err)
		case <-time.After(100 * time.Millisecond):
		}
		release()
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("OldestAndAhead", func(t *testing.T) {
		c := fresh(t, open)
		bs := c.BlockSize()
		r := &Remote{Data: pattern(int(4*bs), 8)}
		c.Validate("f", 1, int64(len(r.Data)), "/d/f")
		for i := range int64(3) {
			if err := c.WriteAt(ctx, "f", []byte("w"), i*bs, r.Fetch); err != nil {
				t.Fatal(err)
			}
		}
		old := c.Oldest("f", 10)
		if len(old) == 0 || slices.Contains(old, blockcache.Range{Off: 2 * bs, Len: 1}) {
			t.Fatalf("Oldest = %v; want the older writes, not the last", old)
		}
		if rs := c.Ahead("f", 1); c.DirtyBytes()+bs <= c.DirtyLimit() && len(rs) != 0 {
			t.Fatalf("Ahead = %v within the dirty limit (%d of %d)", rs, c.DirtyBytes(), c.DirtyLimit())
		}
	})

	t.Run("PinsAndDrop", func(t *testing.T) {
		c := fresh(t, open)
		r := &Remote{Data: pattern(100, 9)}
		c.Validate("f", 1, 100, "/d/f")
		c.Pin("f")
		c.Pin("f")
		c.Unpin("f")
		if !c.Pinned("f") {
			t.Fatal("a file pinned twice and unpinned once is not pinned")
		}
		c.Unpin("f")
		if c.Pinned("f") {
			t.Fatal("a file unpinned as often as pinned is pinned")
		}
		if err := c.WriteAt(ctx, "f", []byte("x"), 0, r.Fetch); err != nil {
			t.Fatal(err)
		}
		c.Drop("f")
		if _, _, ok := c.Version("f"); ok || c.Unsent("f") {
			t.Fatal("a dropped file is still known")
		}
	})

	t.Run("RevertThrowsAwayUnsent", func(t *testing.T) {
		c := fresh(t, open)
		r := &Remote{Data: pattern(100, 10)}
		c.Validate("f", 1, 100, "/d/f")
		if err := c.WriteAt(ctx, "f", []byte("refused"), 200, r.Fetch); err != nil {
			t.Fatal(err)
		}
		if err := c.Revert("f", 4, 100); err != nil {
			t.Fatal(err)
		}
		if v, size, _ := c.Version("f"); c.Unsent("f") || v != 4 || size != 100 {
			t.Fatalf("after Revert: unsent %v, version %d, size %d", c.Unsent("f"), v, size)
		}
		if got := readAll(t, c, "f", 100, r.Fetch); !bytes.Equal(got, r.Data) {
			t.Fatal("after Revert the share's bytes are not read")
		}
	})

	t.Run("FillHoldsASmallFile", func(t *testing.T) {
		c := fresh(t, open)
		data := pattern(300, 11)
		if !c.Fill("f", 5, data, "/d/f") {
			t.Fatal("Fill refused a small file the cache knew nothing of")
		}
		if c.Fill("f", 5, data, "/d/f") {
			t.Fatal("Fill cached the same version twice")
		}
		c.Validate("f", 5, 300, "/d/f")
		r := &Remote{Fail: true}
		if got := readAll(t, c, "f", 300, r.Fetch); !bytes.Equal(got, data) || r.Fetches.Load() != 0 {
			t.Fatalf("a filled file read %d bytes with %d fetches", len(got), r.Fetches.Load())
		}
	})

	t.Run("Stages", func(t *testing.T) {
		c := fresh(t, open)
		bs := c.BlockSize()
		r := &Remote{Data: pattern(int(2*bs), 12)}
		c.Validate("f", 1, int64(len(r.Data)), "/d/f")
		if err := c.WriteAt(ctx, "f", pattern(int(2*bs), 13), 0, r.Fetch); err != nil {
			t.Fatal(err)
		}
		if name, _ := c.StageOf("f"); name != "" {
			t.Fatalf("a stage %q before any was set", name)
		}
		c.SetStage("f", "s1")
		first := []blockcache.Range{{Off: 0, Len: bs}}
		c.MarkStaged("f", "other", first)
		if d := c.Dirty("f"); !slices.Equal(d, []blockcache.Range{{Off: 0, Len: 2 * bs}}) {
			t.Fatalf("ranges marked staged in another stage left the dirty ranges %v", d)
		}
		c.MarkStaged("f", "s1", first)
		name, staged := c.StageOf("f")
		if name != "s1" || !slices.Equal(staged, first) {
			t.Fatalf("StageOf = %q %v; want s1 %v", name, staged, first)
		}
		if d := c.Dirty("f"); !slices.Equal(d, []blockcache.Range{{Off: bs, Len: bs}}) || !c.Unsent("f") {
			t.Fatalf("after staging: dirty %v, unsent %v; want the rest dirty, and unsent", d, c.Unsent("f"))
		}
		rest := c.Dirty("f")
		if err := c.Persist("f"); err != nil {
			t.Fatal(err)
		}
		if !c.HoldsRanges("f", rest) || c.HoldsRanges("g", rest) {
			t.Fatal("HoldsRanges does not say what is on disk")
		}
		c.MarkSent("f", "s1", rest)
		if info := c.Stage("f"); info.Name != "s1" || !slices.Equal(info.Staged, first) || !slices.Equal(info.Sent, rest) {
			t.Fatalf("Stage = %+v", info)
		}
		c.EndStage("f")
		if name, staged := c.StageOf("f"); name != "" || len(staged) != 0 {
			t.Fatalf("after EndStage: %q %v", name, staged)
		}
	})

	t.Run("BackingIsTheWholeVersion", func(t *testing.T) {
		c := fresh(t, open)
		bs := c.BlockSize()
		r := &Remote{Data: pattern(int(2*bs+7), 14)}
		c.Validate("f", 1, int64(len(r.Data)), "/d/f")
		if !c.Holds(int64(len(r.Data))) {
			t.Skip("the cache is too small for a file of three blocks")
		}
		if _, _, ok := c.Backing("f", 1, -1); ok {
			t.Fatal("a backing for a file not held")
		}
		readAll(t, c, "f", int(bs), r.Fetch)
		if _, _, ok := c.Backing("f", 1, -1); ok {
			t.Fatal("a backing for a file held in part")
		}
		readAll(t, c, "f", len(r.Data), r.Fetch)
		if _, _, ok := c.Backing("f", 2, -1); ok {
			t.Fatal("a backing for another version")
		}
		f, gen, ok := c.Backing("f", 1, -1)
		if !ok {
			t.Fatal("no backing for a file held whole")
		}
		defer f.Close()
		got, err := io.ReadAll(io.NewSectionReader(f, 0, int64(len(r.Data))))
		if err != nil || !bytes.Equal(got, r.Data) {
			t.Fatalf("the data file holds %d bytes (%v), not the file's", len(got), err)
		}
		if !c.Whole("f", 1) || c.Whole("f", 2) {
			t.Fatal("Whole does not say which version Backing gives out")
		}
		c.Unback("f", gen)
		c.Preload("f", 1)
		if err := c.WriteAt(ctx, "f", []byte("x"), 0, r.Fetch); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := c.Backing("f", 1, -1); ok {
			t.Fatal("a backing for a file with dirty data")
		}
	})

	t.Run("MetaPersists", func(t *testing.T) {
		dir := t.TempDir()
		c := open(t, dir)
		c.PutMeta(blockcache.MetaAttr, "/d/b", []byte("B"))
		c.PutMeta(blockcache.MetaAttr, "/d/a", []byte("A"))
		c.PutMeta(blockcache.MetaAttr, "/d/c", []byte("C"))
		c.PutMeta(blockcache.MetaDir, "/d", []byte("listing"))
		c.PutMeta(blockcache.MetaAttr, "/d/c", nil)
		if got := c.GetMeta(blockcache.MetaAttr, "/d/a"); string(got) != "A" {
			t.Fatalf("GetMeta = %q", got)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		c = open(t, dir)
		defer c.Close()
		if keys := c.MetaKeys(blockcache.MetaAttr); !slices.Equal(keys, []string{"/d/a", "/d/b"}) {
			t.Fatalf("after a restart MetaKeys = %v; want [/d/a /d/b]", keys)
		}
		if got := c.GetMeta(blockcache.MetaDir, "/d"); string(got) != "listing" || c.GetMeta(blockcache.MetaAttr, "/d/c") != nil {
			t.Fatal("metadata not as put after a restart")
		}
	})

	t.Run("UnsentSurvivesARestart", func(t *testing.T) {
		dir := t.TempDir()
		c := open(t, dir)
		bs := c.BlockSize()
		r := &Remote{Data: pattern(int(bs), 15)}
		c.Validate("f", 1, int64(len(r.Data)), "/d/f")
		if err := c.WriteAt(ctx, "f", []byte("kept"), 3, r.Fetch); err != nil {
			t.Fatal(err)
		}
		c.SetStage("f", "s9")
		if err := c.PersistIndex(); err != nil {
			t.Fatal(err)
		}
		if err := c.Persist("f"); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		c = open(t, dir)
		defer c.Close()
		if d := c.Dirty("f"); !slices.Equal(d, []blockcache.Range{{Off: 3, Len: 4}}) {
			t.Fatalf("after a restart dirty ranges %v; want [3, 7)", d)
		}
		if name, _ := c.StageOf("f"); name != "s9" {
			t.Fatalf("after a restart the stage is %q; want s9", name)
		}
		away := &Remote{Fail: true}
		if got := readAll(t, c, "f", int(bs), away.Fetch); string(got[3:7]) != "kept" || !bytes.Equal(got[7:], r.Data[7:]) {
			t.Fatal("after a restart the file's bytes are not what was written over what was read")
		}
	})
}
