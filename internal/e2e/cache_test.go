package e2e

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

func cacheStat(t *testing.T, a *agentProc, field string) float64 {
	t.Helper()
	return a.stats(t)["cache"].(map[string]any)[field].(float64)
}

// TestRestartServesCacheAndRevalidates: after the agent restarts, cached
// blocks are served without fetching again; a file changed at the share
// while the agent was down, or after, is never served stale beyond the
// consistency window.
func TestRestartServesCacheAndRevalidates(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	same := make([]byte, 5<<20+123)
	rand.Read(same)
	os.WriteFile(filepath.Join(root, "same"), same, 0o644)
	os.WriteFile(filepath.Join(root, "changes"), []byte("version 1"), 0o644)

	base := t.TempDir()
	cache := filepath.Join(base, "cache")
	mnt := filepath.Join(base, "mnt")
	os.MkdirAll(mnt, 0o755)
	const window = time.Second
	mountAt := func() *proc {
		p, _ := start(t, `pando mounted at`, nil, "--config", d.admin, "mount", "--cache-dir", cache, "--consistency", "window=1s", mnt)
		return p
	}
	a := &agentProc{proc: mountAt(), dir: mnt, cacheDir: cache}
	dir := filepath.Join(mnt, "uva", "alpha")
	if got, _ := os.ReadFile(filepath.Join(dir, "same")); !bytes.Equal(got, same) {
		t.Fatal("first read differs")
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "changes")); string(got) != "version 1" {
		t.Fatalf("first read of changes: %q", got)
	}
	fetched := cacheStat(t, a, "BytesFetched")
	if fetched < float64(len(same)) {
		t.Fatalf("the first read fetched %v bytes", fetched)
	}
	a.unmount(t)

	// While the agent is down, one file changes at the share.
	os.WriteFile(filepath.Join(root, "changes"), []byte("version 2, longer"), 0o644)

	b := &agentProc{proc: mountAt(), dir: mnt, cacheDir: cache}
	t.Cleanup(func() { b.unmount(t) })
	if got, _ := os.ReadFile(filepath.Join(dir, "same")); !bytes.Equal(got, same) {
		t.Fatal("read after restart differs")
	}
	if n := cacheStat(t, b, "BytesFetched"); n != 0 {
		t.Errorf("after a restart, the unchanged cached file was fetched again (%v bytes)", n)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "changes")); string(got) != "version 2, longer" {
		t.Errorf("a file changed while the agent was down is served stale: %q", got)
	}

	// A change made at the share while the agent runs shows within the window.
	os.WriteFile(filepath.Join(root, "changes"), []byte("version 3"), 0o644)
	time.Sleep(window + 200*time.Millisecond)
	if got, _ := os.ReadFile(filepath.Join(dir, "changes")); string(got) != "version 3" {
		t.Errorf("stale beyond the window: %q", got)
	}
}

// randomFiles writes n files of random bytes, f0, f1, ..., into dir and
// returns their contents.
func randomFiles(t *testing.T, dir string, n, size int) [][]byte {
	t.Helper()
	want := make([][]byte, n)
	for i := range want {
		want[i] = make([]byte, size)
		rand.Read(want[i])
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint("f", i)), want[i], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// TestEvictionStaysWithinBound: a cache smaller than the working set stays
// within its bound and returns correct data.
func TestEvictionStaysWithinBound(t *testing.T) {
	d := newDomain(t, "uva")
	const files, size = 6, 3 << 20
	want := randomFiles(t, d.addShare("alpha"), files, size)
	const bound = 4 << 20
	a := mountAgent(t, d.admin, "--cache-size", "4MiB", "--memory", "1MiB", "--block-size", "256KiB")
	dir := filepath.Join(a.dir, "uva", "alpha")
	a.settle(t, dir)
	for round := 0; round < 3; round++ {
		for i := range files {
			j := (i*5 + round) % files
			got, err := os.ReadFile(filepath.Join(dir, fmt.Sprint("f", j)))
			if err != nil || !bytes.Equal(got, want[j]) {
				t.Fatalf("round %d file %d: %d bytes, %v", round, j, len(got), err)
			}
			if used := cacheStat(t, a, "DiskBytes"); used > bound {
				t.Fatalf("the cache holds %v bytes, over its bound of %d", used, bound)
			}
		}
	}
	if ev := cacheStat(t, a, "Evictions"); ev == 0 {
		t.Error("nothing was evicted from a cache smaller than the working set")
	}
	// On disk, too: evicted blocks give their space back.
	var blocks int64
	filepath.Walk(filepath.Join(a.cacheDir, "data"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			blocks += fi.Sys().(*syscallStat).Blocks * 512
		}
		return nil
	})
	if blocks > bound+(1<<20) {
		t.Errorf("cache data files use %d bytes of disk, over the bound of %d", blocks, bound)
	}
}

// TestConcurrentReadsUnderEviction: readers at random offsets, several at
// once, of files larger than the cache, whose blocks keep leaving memory
// and disk while replies lend them out (and their buffers are reused, and
// poisoned when freed, see harness_test.go), always read the files' bytes.
func TestConcurrentReadsUnderEviction(t *testing.T) {
	d := newDomain(t, "uva")
	const files, size = 6, 3 << 20
	want := randomFiles(t, d.addShare("alpha"), files, size)
	a := mountAgent(t, d.admin, "--cache-size", "4MiB", "--memory", "1MiB", "--block-size", "256KiB")
	dir := filepath.Join(a.dir, "uva", "alpha")
	a.settle(t, dir)
	deadline := time.Now().Add(3 * time.Second)
	errs := make(chan error, 4)
	for w := range 4 {
		go func() {
			errs <- func() error {
				seed := uint64(w)*0x9e3779b97f4a7c15 + 1
				next := func(n int) int {
					seed ^= seed << 13
					seed ^= seed >> 7
					seed ^= seed << 17
					return int(seed % uint64(n))
				}
				buf := make([]byte, 1<<20)
				for ops := 0; time.Now().Before(deadline); ops++ {
					j := next(files)
					f, err := os.Open(filepath.Join(dir, fmt.Sprint("f", j)))
					if err != nil {
						return err
					}
					for range 8 {
						off, n := next(size), 1+next(len(buf))
						got, err := f.ReadAt(buf[:n], int64(off))
						if err != nil && got != min(n, size-off) {
							f.Close()
							return fmt.Errorf("file %d: read %d at %d: %d bytes, %v", j, n, off, got, err)
						}
						if !bytes.Equal(buf[:got], want[j][off:off+got]) {
							f.Close()
							return fmt.Errorf("file %d: read %d at %d: bytes differ from the file's", j, n, off)
						}
					}
					f.Close()
				}
				return nil
			}()
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if ev := cacheStat(t, a, "Evictions"); ev == 0 {
		t.Error("nothing was evicted from a cache smaller than the working set")
	}
}

// TestCloseReportsUnreachableShareAndKeepsData: when the share cannot be
// reached at close, close fails; the data stays in the cache and reaches
// the share once it is back, with the next close of the file.
func TestCloseReportsUnreachableShareAndKeepsData(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	a := mountAgent(t, d.admin)
	dir := filepath.Join(a.dir, "uva", "alpha")
	p := filepath.Join(dir, "precious")
	if err := os.WriteFile(p, []byte("draft"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("the final text"); err != nil {
		t.Fatal(err)
	}
	d.shares["alpha"].stop(t)
	if err := f.Close(); err == nil {
		t.Fatal("close succeeded although the share was down")
	}
	d.startShare("alpha")
	// The next close of the file sends what the failed one could not.
	g, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("close after the share came back: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "precious")); string(got) != "the final text" {
		t.Fatalf("the share holds %q", got)
	}
}

// TestImmutableRestartCostsNothing: under immutable, a restarted agent
// serves what it had cached, listings and attributes included, without a
// single request to the share.
func TestImmutableRestartCostsNothing(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	os.MkdirAll(filepath.Join(root, "rel/bin"), 0o755)
	os.WriteFile(filepath.Join(root, "rel/bin/tool"), []byte("#!/bin/sh\necho v1\n"), 0o755)
	base := t.TempDir()
	cache, mnt := filepath.Join(base, "cache"), filepath.Join(base, "mnt")
	os.MkdirAll(mnt, 0o755)
	run := func() *agentProc {
		p, _ := start(t, `pando mounted at`, nil, "--config", d.admin, "mount", "--cache-dir", cache, "--policy", "/uva/alpha=immutable", mnt)
		return &agentProc{proc: p, dir: mnt, cacheDir: cache}
	}
	use := func() {
		ents, err := os.ReadDir(filepath.Join(mnt, "uva", "alpha", "rel", "bin"))
		if err != nil || len(ents) != 1 {
			t.Fatalf("listing: %v %v", ents, err)
		}
		if got, _ := os.ReadFile(filepath.Join(mnt, "uva", "alpha", "rel", "bin", "tool")); string(got) != "#!/bin/sh\necho v1\n" {
			t.Fatalf("read: %q", got)
		}
	}
	a := run()
	use()
	a.unmount(t)
	b := run()
	t.Cleanup(func() { b.unmount(t) })
	// Resolving /uva/alpha itself is not under the policy; below it, nothing.
	before := b.stats(t)["rpcs"].(map[string]any)
	use()
	after := b.stats(t)["rpcs"].(map[string]any)
	for op, n := range after {
		if op == "mount-list" || op == "resolve" || op == "auth" {
			continue
		}
		if before[op] != n {
			t.Errorf("restarted agent sent %s requests for immutable data: %v -> %v", op, before[op], n)
		}
	}
}

// TestPassthrough: a file the cache holds whole is read by the kernel from
// the cache's data file (no read reaches the agent), and that never shows
// stale or lost data: an open after a change at the share reads the new
// version while an open from before keeps reading the old one whole, and
// a write while the file is open for passthrough reading is seen by
// readers and reaches the share.
func TestPassthrough(t *testing.T) {
	v1 := make([]byte, 3<<20+4321)
	_, share, p, reads := readOnce(t, v1, "window=1s")

	// With the kernel's page cache dropped, a read that reached the agent
	// would count as a hit or a miss.
	before := reads()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
		t.Fatal("cannot drop the page cache:", err)
	}
	old, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	head := make([]byte, 1<<20)
	if _, err := old.ReadAt(head, 0); err != nil || !bytes.Equal(head, v1[:1<<20]) {
		t.Fatalf("passthrough read: %v", err)
	}
	if n := reads(); n != before {
		t.Errorf("a read of a file cached whole reached the agent (%v reads)", n-before)
	}

	// The file changes at the share, shorter; old stays open.
	v2 := bytes.Repeat([]byte("version two "), 100000)
	os.WriteFile(share, v2, 0o644)
	time.Sleep(1200 * time.Millisecond)
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("an open after the change read %d bytes (%v), want the new %d", len(got), err, len(v2))
	}
	rest := make([]byte, len(v1)-len(head))
	if _, err := old.ReadAt(rest, int64(len(head))); err != nil || !bytes.Equal(rest, v1[len(head):]) {
		t.Errorf("an open from before the change no longer reads the version it opened: %v", err)
	}

	// A write while a reader has the file open.
	reader, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("open for writing while the file is open for reading: %v", err)
	}
	if _, err := w.WriteAt([]byte("WRITTEN"), 5); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), v2...)
	copy(want[5:], "WRITTEN")
	got := make([]byte, 32)
	if _, err := reader.ReadAt(got, 0); err != nil || !bytes.Equal(got, want[:32]) {
		t.Errorf("an open reader reads %q after a write, want %q (%v)", got, want[:32], err)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, want) {
		t.Error("a new open does not read the written file")
	}
	if got, _ := os.ReadFile(share); !bytes.Equal(got, want) {
		t.Error("the write did not reach the share")
	}
}

// TestPassthroughLargeFile: a large file (whose disk work is done in the
// background after its last cached open when there is much of it) is read
// by the kernel from the cache's data file soon after its first read, and
// the agent's stats count that open as passthrough.
func TestPassthroughLargeFile(t *testing.T) {
	data := make([]byte, 40<<20+777)
	a, _, p, reads := readOnce(t, data, "window=30s")
	opens := func() float64 { return a.stats(t)["opens"].(map[string]any)["passthrough"].(float64) }
	before := opens()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
			t.Fatal("cannot drop the page cache:", err)
		}
		before := reads()
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("a later read differs (%v)", err)
		}
		if reads() == before {
			break // no read reached the agent
		}
		if time.Now().After(deadline) {
			t.Fatal("reads of a large file held whole still reach the agent 20 s after its first read")
		}
	}
	if n := opens() - before; n < 1 {
		t.Errorf("pando stats counts %v passthrough opens for a read that did not reach the agent", n)
	}
}

// readOnce fills data with random bytes, puts it at a share as file f,
// mounts an agent in the consistency mode given and reads f through it
// once. It returns the agent, the file at the share and in the mount, and
// a count of the reads that have reached the agent's cache so far.
func readOnce(t *testing.T, data []byte, consistency string) (a *agentProc, share, p string, reads func() float64) {
	t.Helper()
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	rand.Read(data)
	share = filepath.Join(root, "f")
	os.WriteFile(share, data, 0o644)
	a = mountAgent(t, d.admin, "--consistency", consistency)
	dir := filepath.Join(a.dir, "uva", "alpha")
	a.settle(t, dir)
	p = filepath.Join(dir, "f")
	if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
		t.Fatal("first read differs")
	}
	return a, share, p, func() float64 { return cacheStat(t, a, "Hits") + cacheStat(t, a, "Misses") }
}

// TestDirectReadsAndSmallReaders: a large file read through the agent is
// opened for direct I/O (where the kernel allows programs to map such
// files); a program seen reading one in small pieces gets its next open of
// another large file through the page cache, and a mapping of a direct
// open reads the right bytes.
func TestDirectReadsAndSmallReaders(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	data := make([]byte, 20<<20+99)
	rand.Read(data)
	for _, n := range []string{"f", "g", "h"} {
		os.WriteFile(filepath.Join(root, n), data, 0o644)
	}
	a := mountAgent(t, d.admin)
	dir := filepath.Join(a.dir, "uva", "alpha")
	a.settle(t, dir)
	opens := func(kind string) float64 { return a.stats(t)["opens"].(map[string]any)[kind].(float64) }

	// A mapping of a direct open.
	mf, err := os.Open(filepath.Join(dir, "h"))
	if err != nil {
		t.Fatal(err)
	}
	direct := opens("direct")
	if direct == 0 {
		mf.Close()
		if kernelAtLeast(6, 6) {
			t.Fatal("a cold large file was not opened for direct I/O on a kernel that allows it")
		}
		t.Skip("this kernel does not let programs map files opened for direct I/O; large files are page-cached")
	}
	m, err := syscall.Mmap(int(mf.Fd()), 0, len(data), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatalf("mapping a direct open: %v", err)
	}
	if !bytes.Equal(m, data) {
		t.Error("a mapping of a direct open reads other bytes")
	}
	syscall.Munmap(m)
	mf.Close()

	// One thread: the kernel names the thread that asks.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f, err := os.Open(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var got []byte
	for {
		n, err := f.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	f.Close()
	if !bytes.Equal(got, data) {
		t.Fatal("a read in small pieces differs")
	}
	if n := opens("direct"); n != direct+1 {
		t.Fatalf("pando stats counts %v direct opens after a cold large open; want %v", n, direct+1)
	}
	cached := opens("cached")
	g, err := os.ReadFile(filepath.Join(dir, "g"))
	if err != nil || !bytes.Equal(g, data) {
		t.Fatalf("reading g: %v", err)
	}
	if n := opens("cached"); n != cached+1 {
		t.Errorf("a program that read a direct open in small pieces got %v page-cached opens of the next large file; want 1", n-cached)
	}
}

// kernelAtLeast reports whether the running kernel is version major.minor
// or newer.
func kernelAtLeast(major, minor int) bool {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return false
	}
	var rel []byte
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		rel = append(rel, byte(c))
	}
	var ma, mi int
	fmt.Sscanf(string(rel), "%d.%d", &ma, &mi)
	return ma > major || ma == major && mi >= minor
}
