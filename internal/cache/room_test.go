package cache

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// smallFS mounts a tmpfs of size bytes for the test and returns its
// directory. It needs root; without it the test is skipped, except in CI.
func smallFS(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getuid() != 0 && os.Getenv("CI") == "" {
			t.Skipf("cannot mount a tmpfs here (%v: %s)", err, out)
		}
		t.Fatalf("mounting a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("unmounting the tmpfs: %v: %s", err, out)
		}
	})
	return dir
}

// ballast fills the file system of dir with a file until it is full.
func ballast(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "ballast"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	// And the last pages.
	for {
		if _, err := f.Write(buf[:4096]); err != nil {
			return
		}
	}
}

// logBuf collects what a cache logs.
type logBuf struct{ bytes.Buffer }

func (l *logBuf) logger() *slog.Logger { return slog.New(slog.NewTextHandler(&l.Buffer, nil)) }

// TestFullDiskEvictsCleanBlocks: a cache whose bound (asked far larger
// than its file system, so capped with a warning) is not reached, on a
// file system that other files have filled, takes a write of new data by
// evicting clean blocks, least recently used first, and the data reads
// back; the clean data evicted is fetched again when read.
func TestFullDiskEvictsCleanBlocks(t *testing.T) {
	const mib = 1 << 20
	dir := smallFS(t, 16*mib)
	var log logBuf
	c := open(t, dir, Options{BlockSize: mib, DiskBytes: 1 << 30, MemoryBytes: -1, Log: log.logger()})
	if got := c.DiskLimit(); got != 16*mib {
		t.Errorf("a bound asked larger than the file system is %d, want it capped to %d", got, 16*mib)
	}
	if !strings.Contains(log.String(), "more than the file system") {
		t.Errorf("no warning that the asked size was capped; log: %s", log.String())
	}
	ctx := context.Background()
	remotes := make([]*remote, 8)
	for i := range remotes {
		remotes[i] = &remote{Data: make([]byte, mib)}
		rand.Read(remotes[i].Data)
		fill(t, c, fmt.Sprint("clean", i), 1, remotes[i])
	}
	c.Sync()
	if err := c.PersistIndex(); err != nil {
		t.Fatal(err)
	}
	ballast(t, dir)
	before := c.Stats()
	if before.DiskBytes != 8*mib || before.Evictions != 0 {
		t.Fatalf("before the write: %d bytes cached, %d evictions; want 8 MiB and none", before.DiskBytes, before.Evictions)
	}

	data := make([]byte, 3*mib)
	rand.Read(data)
	c.Validate("new", 1, 0, "/d/new")
	if err := c.WriteAt(ctx, "new", data, 0, (&remote{}).Fetch); err != nil {
		t.Fatalf("a write to a full cache disk with clean blocks to evict: %v", err)
	}
	st := c.Stats()
	if st.Full == 0 || st.Evictions < 3 {
		t.Fatalf("after the write: %d writes found the disk full, %d evictions; want some, and 3 or more", st.Full, st.Evictions)
	}
	got := make([]byte, len(data))
	if _, err := c.ReadAt(ctx, "new", got, 0, (&remote{}).Fetch); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the written data does not read back")
	}
	if d := c.Dirty("new"); len(d) != 1 || d[0] != (Range{Off: 0, Len: 3 * mib}) {
		t.Fatalf("dirty ranges %v, want [0, 3 MiB)", d)
	}
	// The least recently used went first: clean0 (read first), not clean7.
	if c.Present("clean0", 0) || !c.Present("clean7", 0) {
		t.Errorf("eviction order: clean0 cached %v, clean7 cached %v; want the oldest gone, the newest kept", c.Present("clean0", 0), c.Present("clean7", 0))
	}
	// The evicted one is fetched again, right.
	n := remotes[0].Fetches.Load()
	if _, err := c.ReadAt(ctx, "clean0", got[:mib], 0, remotes[0].Fetch); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:mib], remotes[0].Data) || remotes[0].Fetches.Load() == n {
		t.Fatal("an evicted block was not fetched again, or read wrong")
	}
}

// TestFullDiskWithNothingToEvictRefusesAndChangesNothing: when the file
// system is full and every cached block holds dirty data, a write fails
// with ENOSPC, and the file keeps its data, dirty ranges and size.
func TestFullDiskWithNothingToEvictRefusesAndChangesNothing(t *testing.T) {
	const mib = 1 << 20
	dir := smallFS(t, 8*mib)
	c, err := Open(Options{Dir: dir, BlockSize: mib, DiskBytes: 8 * mib, MemoryBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			c.Close()
		}
	})
	ctx := context.Background()
	old := make([]byte, 2*mib)
	rand.Read(old)
	c.Validate("f", 1, 0, "/d/f")
	if err := c.WriteAt(ctx, "f", old, 0, (&remote{}).Fetch); err != nil {
		t.Fatal(err)
	}
	if err := c.PersistIndex(); err != nil {
		t.Fatal(err)
	}
	ballast(t, dir)
	more := make([]byte, 2*mib)
	rand.Read(more)
	err = c.WriteAt(ctx, "f", more, 2*mib, (&remote{}).Fetch)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write with nothing to evict: %v, want ENOSPC", err)
	}
	if d := c.Dirty("f"); len(d) != 1 || d[0] != (Range{Off: 0, Len: 2 * mib}) {
		t.Errorf("dirty ranges after the refused write: %v, want [0, 2 MiB)", d)
	}
	if _, size, _ := c.Version("f"); size != 2*mib {
		t.Errorf("size after the refused write: %d, want %d", size, 2*mib)
	}
	if got := c.DirtyBytes(); got != 2*mib {
		t.Errorf("dirty bytes after the refused write: %d, want %d", got, 2*mib)
	}
	got := make([]byte, 2*mib)
	if _, err := c.ReadAt(ctx, "f", got, 0, (&remote{}).Fetch); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if !bytes.Equal(got, old) {
		t.Error("the data written before the refused write changed")
	}
	// An index flush that failed meanwhile is tried again once there is
	// room; the file is as it was after a restart too.
	_ = c.PersistIndex()
	if err := os.Remove(filepath.Join(dir, "ballast")); err != nil {
		t.Fatal(err)
	}
	closed = true
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = open(t, dir, Options{BlockSize: mib, DiskBytes: 8 * mib, MemoryBytes: -1})
	if d := c.Dirty("f"); len(d) != 1 || d[0] != (Range{Off: 0, Len: 2 * mib}) {
		t.Errorf("dirty ranges after a restart: %v, want [0, 2 MiB)", d)
	}
	if _, err := c.ReadAt(ctx, "f", got, 0, (&remote{}).Fetch); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if !bytes.Equal(got, old) {
		t.Error("the data written before the refused write changed across a restart")
	}
}

// TestDefaultBoundIsAShareOfTheFreeSpace: without a bound asked for, the
// disk layer takes 80% of its file system's free space, counting what the
// cache holds as its own: a restart with data cached keeps the bound.
func TestDefaultBoundIsAShareOfTheFreeSpace(t *testing.T) {
	const mib = 1 << 20
	dir := smallFS(t, 32*mib)
	c, err := Open(Options{Dir: dir, BlockSize: mib, MemoryBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	first := c.DiskLimit()
	if first < 24*mib || first > 32*mib*8/10 {
		c.Close()
		t.Fatalf("default bound on a 32 MiB file system: %d, want about 80%% of it", first)
	}
	data := make([]byte, 8*mib)
	rand.Read(data)
	c.Validate("f", 1, 0, "/d/f")
	if err := c.WriteAt(context.Background(), "f", data, 0, (&remote{}).Fetch); err != nil {
		c.Close()
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = open(t, dir, Options{BlockSize: mib, MemoryBytes: -1})
	if got := c.DiskLimit(); got < first-mib || got > first+mib {
		t.Fatalf("default bound after a restart with 8 MiB cached: %d, want about %d as before", got, first)
	}
	if got := c.DirtyBytes(); got != 8*mib {
		t.Fatalf("dirty bytes after a restart: %d, want %d", got, 8*mib)
	}
}

// TestAheadNamesTheOldestDirtyBlocks: past half the disk bound, a writer
// is told to send its least recently written dirty blocks, never its
// newest; once marked clean they count no more and can be evicted.
func TestAheadNamesTheOldestDirtyBlocks(t *testing.T) {
	const bs = 4096
	c := open(t, t.TempDir(), Options{BlockSize: bs, DiskBytes: 16 * bs, MemoryBytes: -1})
	ctx := context.Background()
	c.Validate("f", 1, 0, "/d/f")
	// Blocks 4..7 first, then 0..1: 4..7 are the oldest.
	for _, w := range []struct{ off, n int64 }{{4 * bs, 4 * bs}, {0, 2 * bs}} {
		if err := c.WriteAt(ctx, "f", make([]byte, w.n), w.off, (&remote{}).Fetch); err != nil {
			t.Fatal(err)
		}
	}
	if rs := c.Ahead("f", bs-100); len(rs) != 0 {
		t.Fatalf("6 dirty blocks of a limit of 8, a write of one more: told to send %v already", rs)
	}
	if err := c.WriteAt(ctx, "f", make([]byte, 100), 2*bs, (&remote{}).Fetch); err != nil {
		t.Fatal(err)
	}
	rs := c.Ahead("f", bs)
	if len(rs) != 1 || rs[0] != (Range{Off: 4 * bs, Len: 2 * bs}) {
		t.Fatalf("told to send %v, want the oldest blocks, [%d, %d)", rs, 4*bs, 6*bs)
	}
	if all := c.Oldest("f", 100); len(all) != 2 || all[0] != (Range{Off: 0, Len: 2 * bs}) || all[1] != (Range{Off: 4 * bs, Len: 4 * bs}) {
		t.Fatalf("every block but the newest: %v, want [0, %d) and [%d, %d)", all, 2*bs, 4*bs, 8*bs)
	}
	c.MarkClean("f", rs, AllWrites, 2, 0)
	if got := c.DirtyBytes(); got != 5*bs {
		t.Fatalf("dirty bytes after the oldest were sent: %d, want %d", got, 5*bs)
	}
	if rs := c.Ahead("f", bs); len(rs) != 0 {
		t.Fatalf("with room again, told to send %v", rs)
	}
	if n := c.evictLRU(func() bool { return false }, nil); n != 2 {
		t.Fatalf("evicted %d blocks, want the 2 sent", n)
	}
}

// TestAddsDirty: the blocks a write would newly make dirty, and a file's
// dirty bytes, count whole blocks, those dirty already not again.
func TestAddsDirty(t *testing.T) {
	const bs = 4096
	c, err := Open(Options{Dir: t.TempDir(), BlockSize: bs, DiskBytes: 1 << 20, MemoryBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	c.Validate("f", 1, 0, "/d/f")
	if got := c.AddsDirty("f", 10, 100); got != bs {
		t.Errorf("a write into a clean block adds %d, want %d", got, bs)
	}
	if err := c.WriteAt(ctx, "f", make([]byte, bs), bs+10, (&remote{}).Fetch); err != nil {
		t.Fatal(err)
	}
	if got := c.DirtyBytesOf("f"); got != 2*bs {
		t.Errorf("dirty bytes of f: %d, want %d (two blocks touched)", got, 2*bs)
	}
	for _, tc := range []struct{ off, n, want int64 }{
		{bs + 100, 10, 0},           // inside a dirty block
		{0, 3 * bs, bs},             // block 0 and blocks 1, 2 dirty
		{2*bs - 1, 2 * bs, bs},      // blocks 1, 2 dirty, 3 new
		{5 * bs, 1, bs},             // past the end
		{0, 0, 0},                   // nothing written
		{bs + 5000, 5 * bs, 5 * bs}, // blocks 2..7: 3..7 new
	} {
		if got := c.AddsDirty("f", tc.off, tc.n); got != tc.want {
			t.Errorf("AddsDirty(%d, %d) = %d, want %d", tc.off, tc.n, got, tc.want)
		}
	}
	if got := c.AddsDirty("none", 0, 1); got != bs {
		t.Errorf("a write to a file not cached adds %d, want %d", got, bs)
	}
}
