package e2e

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A cache on a small file system: its bound defaults to a share of the
// free space, reads that fill it evict, a write into it succeeds, and a
// file three times its size is written and read back byte-exact, in close
// mode and in back mode (a writer sends its oldest blocks ahead).

const smallCache = 32 << 20 // the tmpfs the cache directory is on

// mountSmallCache mounts an agent whose cache directory is on a tmpfs of
// smallCache bytes, with the default cache size and the flags extra.
func mountSmallCache(t *testing.T, cfg string, extra ...string) *agentProc {
	t.Helper()
	base := t.TempDir()
	cache, mnt := filepath.Join(base, "cache"), filepath.Join(base, "mnt")
	if !mountTmpfs(t, cache, "size=32m") {
		t.Skip("needs a tmpfs (root)")
	}
	os.MkdirAll(mnt, 0o755)
	args := append([]string{"--config", cfg, "mount", "--cache-dir", cache}, extra...)
	p, _ := start(t, `pando mounted at`, nil, append(args, mnt)...)
	a := &agentProc{proc: p, dir: mnt, cacheDir: cache}
	t.Cleanup(func() { a.unmount(t) })
	return a
}

func sum(b []byte) [32]byte { return sha256.Sum256(b) }

// fileSum hashes the file at p.
func fileSum(t *testing.T, p string) [32]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatalf("reading %s: %v", p, err)
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

// writeInPieces writes data to p in 1 MiB writes and closes it, failing the
// test with what went wrong.
func writeInPieces(t *testing.T, p string, data []byte) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 1 << 20 {
		if _, err := f.Write(data[off:min(len(data), off+1<<20)]); err != nil {
			f.Close()
			t.Fatalf("writing %s at %d: %v", p, off, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatalf("closing %s: %v", p, err)
	}
}

// bound checks the agent's default cache bound: about 80% of the tmpfs.
func bound(t *testing.T, a *agentProc) int {
	t.Helper()
	limit := int(cacheStat(t, a, "DiskLimit"))
	if limit < smallCache*6/10 || limit > smallCache*8/10 {
		t.Fatalf("default cache size on a %d-byte file system: %d, want about 80%% of it", smallCache, limit)
	}
	return limit
}

// TestSmallCacheCloseMode: reads fill the cache (and evict, within its
// bound), a write then succeeds, and a file three times the cache's size
// written in close mode reaches the share and reads back byte-exact.
func TestSmallCacheCloseMode(t *testing.T) {
	d := newDomain(t, "cf")
	root := d.addShare("data")
	a := mountSmallCache(t, d.admin)
	fillThenWrite(t, a, root, filepath.Join(a.dir, "cf", "data"), bound(t, a))
}

// TestSmallCacheSizedLargerThanItsDisk: --cache-size 10GiB on a 32 MiB
// file system is capped to it, with a warning; reads and writes work as
// with the default size (the disk fills before the bound: writes evict).
func TestSmallCacheSizedLargerThanItsDisk(t *testing.T) {
	d := newDomain(t, "cs")
	root := d.addShare("data")
	a := mountSmallCache(t, d.admin, "--cache-size", "10GiB")
	if limit := int(cacheStat(t, a, "DiskLimit")); limit != smallCache {
		t.Fatalf("--cache-size 10GiB on a %d-byte file system: the cache may use %d, want it capped to the file system", smallCache, limit)
	}
	if !strings.Contains(a.output(), "more than the file system") {
		t.Errorf("no warning that --cache-size was capped:\n%s", a.output())
	}
	fillThenWrite(t, a, root, filepath.Join(a.dir, "cs", "data"), smallCache)
}

// fillThenWrite reads files larger than the cache of limit bytes through
// dir (the share's root is root), writes a small file and then one three
// times the cache's size, and checks what the share holds and what reads
// back.
func fillThenWrite(t *testing.T, a *agentProc, root, dir string, limit int) {
	t.Helper()
	at := func(name string) string { return filepath.Join(dir, name) }
	// Read files that together are larger than the cache.
	var reads [][]byte
	for i := range 5 {
		b := randomBytes(uint64(10+i), 8<<20)
		if err := os.WriteFile(filepath.Join(root, fmt.Sprint("r", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		reads = append(reads, b)
	}
	for i, b := range reads {
		if fileSum(t, at(fmt.Sprint("r", i))) != sum(b) {
			t.Fatalf("file r%d read wrong through the mount", i)
		}
	}
	if n := cacheStat(t, a, "Evictions"); n == 0 {
		t.Errorf("40 MiB read through a cache of %d bytes: no evictions", limit)
	}

	// A write into the full cache.
	small := randomBytes(20, 3<<20)
	writeInPieces(t, at("small"), small)
	if got, err := os.ReadFile(filepath.Join(root, "small")); err != nil || !bytes.Equal(got, small) {
		t.Fatalf("the share holds %d bytes of the file written into a full cache (%v), not the %d written", len(got), err, len(small))
	}

	// A file three times the cache's size.
	big := randomBytes(21, 3*limit+12345)
	writeInPieces(t, at("big"), big)
	if fileSum(t, filepath.Join(root, "big")) != sum(big) {
		t.Fatalf("the share's copy of a file three times the cache differs from what was written\n%s", a.output())
	}
	if fileSum(t, at("big")) != sum(big) {
		t.Fatal("a file three times the cache reads back wrong through the mount")
	}
	if n := cacheStat(t, a, "SentAhead"); n < float64(len(big)-limit) {
		t.Errorf("%v bytes sent ahead of the close, want at least %d", n, len(big)-limit)
	}
	if n := cacheStat(t, a, "DirtyBytes"); n != 0 {
		t.Errorf("%v bytes still unsent after the close", n)
	}
	t.Logf("cache of %d bytes: %v evictions, %v writes found the disk full, %v bytes sent ahead",
		limit, cacheStat(t, a, "Evictions"), cacheStat(t, a, "Full"), cacheStat(t, a, "SentAhead"))
}

// TestSmallCacheBackMode: under a write delegation (write mode back), a
// file three times the cache's size is written: the writer sends its
// oldest blocks ahead instead of failing, the close keeps back the rest,
// and the file reads back byte-exact, through the mount and at the share
// once the delegation sends it.
func TestSmallCacheBackMode(t *testing.T) {
	d := newDomain(t, "cb")
	root := d.addShare("data")
	a := mountSmallCache(t, d.admin, "--consistency", "callback", "--write", "back")
	limit := bound(t, a)
	dir := filepath.Join(a.dir, "cb", "data")
	backChannel(t, a, dir)

	big := randomBytes(31, 3*limit+54321)
	writeInPieces(t, filepath.Join(dir, "big"), big)
	if n := delegStat(t, a, "granted"); n < 1 {
		t.Fatalf("%v write delegations granted, want the writer's", n)
	}
	if n := cacheStat(t, a, "SentAhead"); n < float64(len(big)-limit) {
		t.Errorf("%v bytes sent ahead, want at least %d", n, len(big)-limit)
	}
	if fileSum(t, filepath.Join(dir, "big")) != sum(big) {
		t.Fatal("a file three times the cache reads back wrong through the mount")
	}
	eventually(t, 60*time.Second, "the kept back rest reaches the share", func() bool {
		return cacheStat(t, a, "DirtyBytes") == 0
	})
	if fileSum(t, filepath.Join(root, "big")) != sum(big) {
		t.Fatalf("the share's copy of a file three times the cache differs from what was written\n%s", a.output())
	}
	t.Logf("cache of %d bytes: %v evictions, %v writes found the disk full, %v bytes sent ahead",
		limit, cacheStat(t, a, "Evictions"), cacheStat(t, a, "Full"), cacheStat(t, a, "SentAhead"))
}
