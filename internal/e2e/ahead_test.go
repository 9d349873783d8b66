package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A file larger than the cache is written by sending its oldest blocks
// ahead of the close, into a named stage at the share that the close
// commits: the share's file is the old version until then, also when the
// agent is killed in between and started again (see docs/consistency.md,
// "A full cache").

// readerLoop reads the file p (through another agent's mount) in a loop
// until stop is closed, and records every content that is neither old
// nor, if prefix is set, a prefix of data of at least min bytes; else
// neither old nor data. It returns a function that waits for the loop and
// reports the reads of old, of new versions, and what else was seen;
// olds counts the reads of old so far.
func readerLoop(p string, old, data []byte, prefix bool, stop <-chan struct{}) (wait func() (nOld, nNew int, bad []string), olds func() int) {
	var mu sync.Mutex
	var nOld, nNew int
	var bad []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := os.ReadFile(p)
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			mu.Lock()
			switch {
			case bytes.Equal(b, old):
				nOld++
			case bytes.Equal(b, data), prefix && len(b) > 0 && bytes.HasPrefix(data, b):
				nNew++
			default:
				bad = append(bad, versionDiff(b, old, data))
			}
			mu.Unlock()
		}
	}()
	return func() (int, int, []string) {
			<-done
			mu.Lock()
			defer mu.Unlock()
			return nOld, nNew, bad
		}, func() int {
			mu.Lock()
			defer mu.Unlock()
			return nOld
		}
}

// versionDiff says how b differs from old and from data: its length, and
// where it first differs from each.
func versionDiff(b, old, data []byte) string {
	first := func(x []byte) int {
		for i := range min(len(b), len(x)) {
			if b[i] != x[i] {
				return i
			}
		}
		return min(len(b), len(x))
	}
	return fmt.Sprintf("%d bytes, differing from the old version (%d bytes) at %d, from the new (%d bytes) at %d",
		len(b), len(old), first(old), len(data), first(data))
}

// stagedBytes is the size of the stages in the share's root.
func stagedBytes(t *testing.T, root string) int64 {
	t.Helper()
	ents, _ := os.ReadDir(root)
	var n int64
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".pando-stage-") {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
	}
	return n
}

// writeHalf opens p for writing (O_TRUNC) and writes data[:n] in 1 MiB
// writes, leaving it open.
func writeHalf(t *testing.T, p string, data []byte, n int) *os.File {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < n; off += 1 << 20 {
		if _, err := f.Write(data[off:min(n, off+1<<20)]); err != nil {
			f.Close()
			t.Fatalf("writing %s at %d: %v", p, off, err)
		}
	}
	return f
}

// TestSendAheadOldOrNew: a file three times the cache, written in close
// mode, sends most of itself ahead of the close; until the close the
// share's file is the old version byte for byte, and a reader on another
// agent, reading it in a loop all along, sees the old version or the new,
// never a mix. No stage is left once it is committed.
func TestSendAheadOldOrNew(t *testing.T) {
	d := newDomain(t, "sa")
	root := d.addShare("data")
	a := mountSmallCache(t, d.admin)
	limit := bound(t, a)
	old := randomBytes(41, 3*limit+777)
	if err := os.WriteFile(filepath.Join(root, "big"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	data := randomBytes(42, 3*limit+4321)
	r := mountAgent(t, d.admin)
	stop := make(chan struct{})
	wait, olds := readerLoop(filepath.Join(r.dir, "sa", "data", "big"), old, data, false, stop)
	eventually(t, time.Minute, "the reader reads the old version", func() bool { return olds() > 0 })

	// Nothing may run a program while the file is open: a child's
	// descriptors are closed when it starts, and each close(2) of the
	// file sends what was written (close-to-open).
	f := writeHalf(t, filepath.Join(a.dir, "sa", "data", "big"), data, 2*limit)
	if n := stagedBytes(t, root); n < int64(limit/2) {
		f.Close()
		t.Fatalf("%d bytes in a stage at the share after writing twice the cache, want at least %d sent ahead", n, limit/2)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "big")); !bytes.Equal(got, old) {
		f.Close()
		t.Fatalf("with data sent ahead and the file not closed, the share's file is not the old version: %s", versionDiff(got, old, data))
	}
	for off := 2 * limit; off < len(data); off += 1 << 20 {
		if _, err := f.Write(data[off:min(len(data), off+1<<20)]); err != nil {
			t.Fatalf("writing at %d: %v", off, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if diff := fileDiff(filepath.Join(root, "big"), data); diff != "" {
		t.Fatalf("after the close the share's file is not the new version: %s", diff)
	}
	eventually(t, time.Minute, "the reader sees the new version", func() bool {
		got, _ := os.ReadFile(filepath.Join(r.dir, "sa", "data", "big"))
		return bytes.Equal(got, data)
	})
	close(stop)
	nOld, nNew, bad := wait()
	for _, b := range bad {
		t.Errorf("the reader saw a version that is neither the old nor the new: %s", b)
	}
	t.Logf("reader: %d reads of the old version, %d of the new; %v bytes sent ahead", nOld, nNew, cacheStat(t, a, "SentAhead"))
	noStage(t, root)
}

// TestSendAheadAgentKilled: the writing agent is killed (SIGKILL) after
// it sent data ahead and before the close. The share's file stays the old
// version while it is dead; started again on its cache, it commits what
// it holds (the file as written up to its last record) at once, the stage
// with it. A reader on another agent sees the old version, then the new,
// never a mix.
func TestSendAheadAgentKilled(t *testing.T) {
	d := newDomain(t, "sk")
	root := d.addShare("data")
	base := t.TempDir()
	cache, mnt := filepath.Join(base, "cache"), filepath.Join(base, "mnt")
	if !mountTmpfs(t, cache, "size=32m") {
		t.Skip("needs a tmpfs (root)")
	}
	os.MkdirAll(mnt, 0o755)
	mount := func() *agentProc {
		p, _ := start(t, `pando mounted at`, nil, "--config", d.admin, "mount", "--cache-dir", cache, mnt)
		return &agentProc{proc: p, dir: mnt, cacheDir: cache}
	}
	a := mount()
	limit := bound(t, a)
	old := randomBytes(43, 2*limit+99)
	if err := os.WriteFile(filepath.Join(root, "big"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	data := randomBytes(44, 3*limit+55)
	r := mountAgent(t, d.admin)
	stop := make(chan struct{})
	wait, olds := readerLoop(filepath.Join(r.dir, "sk", "data", "big"), old, data, true, stop)
	eventually(t, time.Minute, "the reader reads the old version", func() bool { return olds() > 0 })

	// No program may run while the file is open (see TestSendAheadOldOrNew).
	f := writeHalf(t, filepath.Join(mnt, "sk", "data", "big"), data, 2*limit)
	sent := stagedBytes(t, root)
	if sent < int64(limit/2) {
		t.Fatalf("%d bytes in a stage at the share after writing twice the cache, want at least %d sent ahead", sent, limit/2)
	}
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
	f.Close() // fails: the agent is gone
	syscall.Unmount(mnt, syscall.MNT_DETACH)
	t.Logf("writer before it was killed:\n%s", a.output())
	if diff := fileDiff(filepath.Join(root, "big"), old); diff != "" {
		t.Fatalf("with the writer killed after sending data ahead, the share's file is not the old version: %s", diff)
	}
	if n := stagedBytes(t, root); n != sent {
		t.Fatalf("%d bytes in stages at the share while the writer is dead, want the %d it sent ahead", n, sent)
	}

	a = mount()
	t.Cleanup(func() { a.unmount(t) })
	// Read at the share's disk once the stage is gone: a commit copies
	// in place, and only readers through the share wait for it.
	eventually(t, time.Minute, "the restarted agent commits its stage", func() bool {
		return stagedBytes(t, root) == 0
	})
	got, _ := os.ReadFile(filepath.Join(root, "big"))
	if len(got) < int(sent) || !bytes.HasPrefix(data, got) {
		t.Fatalf("after the restart the share's file holds %s; want the new version as written up to at least the %d bytes sent ahead",
			versionDiff(got, old, data), sent)
	}
	eventually(t, time.Minute, "the reader sees the new version", func() bool {
		b, _ := os.ReadFile(filepath.Join(r.dir, "sk", "data", "big"))
		return bytes.Equal(b, got)
	})
	close(stop)
	nOld, nNew, bad := wait()
	for _, b := range bad {
		t.Errorf("the reader saw a version that is neither the old nor the new: %s", b)
	}
	t.Logf("reader: %d reads of the old version, %d of the new (%d of %d bytes committed, %d sent ahead before the kill)",
		nOld, nNew, len(got), len(data), sent)
	if n := a.stats(t)["conflicts"].(float64); n != 0 {
		t.Errorf("the agent reported %v conflicts for its own write:\n%s", n, a.output())
	}
	noStage(t, root)
}

// TestWriteBackResumesAfterRestart: an agent killed in the middle of a
// close's write-back (after its first batch reached the share's stage)
// leaves the share's file as it was; started again on its cache, it
// sends only what the stage does not hold yet, and commits.
func TestWriteBackResumesAfterRestart(t *testing.T) {
	d := newDomain(t, "wr")
	root := d.addShare("data")
	const point = "vfs.staged.after-batch"
	old := randomBytes(45, 5<<20+1)
	if err := os.WriteFile(filepath.Join(root, "f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	c := newCrashAgent(t, d.admin)
	c.run(point + "@1")
	data := randomBytes(46, 40<<20+9)
	if err := writeFile(filepath.Join(c.mnt, "wr", "data", "f"), data); err == nil {
		t.Fatal("close succeeded although the agent died in its write-back")
	}
	c.died(point)
	if got, _ := os.ReadFile(filepath.Join(root, "f")); !bytes.Equal(got, old) {
		t.Fatalf("with the writer dead mid-write-back, the share's file is not the old version: %s", versionDiff(got, old, data))
	}
	held := stagedBytes(t, root)
	if held < 16<<20 {
		t.Fatalf("the share's stage holds %d bytes after the first batch, want at least %d", held, 16<<20)
	}
	a := c.run("")
	eventually(t, time.Minute, "the restarted agent commits the file", func() bool { return stagedBytes(t, root) == 0 })
	if got, _ := os.ReadFile(filepath.Join(root, "f")); !bytes.Equal(got, data) {
		t.Fatalf("after the restart the share's file is not the new version: %s\n%s", versionDiff(got, old, data), a.output())
	}
	// Writes of 1 MiB: the restarted agent sends what the stage lacked.
	writes := rpcCount(t, a, "write")
	if want := float64(len(data)-int(held))/(1<<20) + 2; writes > want {
		t.Fatalf("the restarted agent sent %v writes, want at most %v (the stage held %d of %d bytes)", writes, want, held, len(data))
	}
	t.Logf("the stage held %d of %d bytes at the restart; the restarted agent sent %v writes", held, len(data), writes)
	if n := a.stats(t)["conflicts"].(float64); n != 0 {
		t.Errorf("the agent reported %v conflicts for its own write-back:\n%s", n, a.output())
	}
}
