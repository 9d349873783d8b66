package e2e

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/fault"
)

// A file at the share is its old version or its new one, never a mix:
// writes that replace a file go through a stage the share commits at once
// (see docs/consistency.md). These tests fill real small file systems.

// smallShare starts a domain with one share exported from a tmpfs of the
// given size, and returns it with the share's root.
func smallShare(t *testing.T, domain, size string) (*domain, string) {
	t.Helper()
	d := newDomain(t, domain)
	root := filepath.Join(d.dir, "export-small")
	if !mountTmpfs(t, root, "size="+size) {
		t.Skip("needs a tmpfs (root)")
	}
	return d, d.addShare("small")
}

// noStage checks that no stage is left in the share's root.
func noStage(t *testing.T, root string) {
	t.Helper()
	eventually(t, 30*time.Second, "no stage is left at the share", func() bool {
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".pando-") || strings.Contains(e.Name(), ".pando-") {
				return false
			}
		}
		return true
	})
}

// TestPutFullShareKeepsOldVersion: `pando put` of a file larger than the
// free space of its share fails with a clear message; the file it would
// have replaced is intact, a file it would have created is not there, and
// no temporary is left. A put that fits replaces the file.
func TestPutFullShareKeepsOldVersion(t *testing.T) {
	d, root := smallShare(t, "tp", "16m")
	old := randomBytes(1, 6<<20)
	if err := os.WriteFile(filepath.Join(root, "f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(big, randomBytes(2, 12<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	r := d.pando(d.admin, "put", big, "/tp/small/f").fails(1, "big.bin", "does not fit in the free space", "the file there is unchanged", "no space left")
	t.Logf("pando put: %s", r.stderr)
	if diff := fileDiff(filepath.Join(root, "f"), old); diff != "" {
		t.Fatalf("after a put that did not fit, the share's file is not the old version: %s", diff)
	}
	noStage(t, root)

	d.pando(d.admin, "put", big, "/tp/small/g").fails(1, "does not fit in the free space", "nothing was left there")
	if _, err := os.Lstat(filepath.Join(root, "g")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a put of a new file that did not fit left it at the share (%v)", err)
	}
	noStage(t, root)

	fits := randomBytes(3, 2<<20+5)
	small := filepath.Join(t.TempDir(), "small.bin")
	if err := os.WriteFile(small, fits, 0o644); err != nil {
		t.Fatal(err)
	}
	d.pando(d.admin, "put", small, "/tp/small/f").ok()
	if diff := fileDiff(filepath.Join(root, "f"), fits); diff != "" {
		t.Fatalf("a put that fits did not replace the file: %s", diff)
	}
	noStage(t, root)
}

// TestCloseWriteFullShareKeepsOldVersion: a close-mode write through the
// mount of a file too large for its share fails at close with ENOSPC and
// leaves the old version at the share; once there is room, the data the
// close kept in the cache is sent.
func TestCloseWriteFullShareKeepsOldVersion(t *testing.T) {
	d, root := smallShare(t, "tc", "24m")
	old := randomBytes(4, 4<<20)
	if err := os.WriteFile(filepath.Join(root, "f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(root, "filler")
	if err := os.WriteFile(filler, make([]byte, 12<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	a := mountAgent(t, d.admin, "--write", "close")
	p := filepath.Join(a.dir, "tc", "small", "f")
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, old) {
		t.Fatalf("the mount reads %d bytes (%v), not the old version", len(got), err)
	}
	data := randomBytes(5, 8<<20+3)
	err := writeFile(p, data)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("close of a write larger than the share's free space returned %v, want ENOSPC", err)
	}
	if diff := fileDiff(filepath.Join(root, "f"), old); diff != "" {
		t.Fatalf("after a close that failed for want of room, the share's file is not the old version: %s", diff)
	}
	noStage(t, root)
	if diff := fileDiff(filepath.Join(root, "f"), old); diff != "" {
		t.Fatalf("while the data waits for room, the share's file is not the old version: %s", diff)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	settled(t, "the data the close kept reaches the share once there is room", func() bool {
		return sameFile(filepath.Join(root, "f"), data)
	})
	if n := a.stats(t)["conflicts"].(float64); n != 0 {
		t.Fatalf("the agent's own unsent data was reported as %v conflicts:\n%s", n, a.output())
	}
}

// hashLoop hashes the file p in a loop until stop is closed, and
// reports each distinct hash it saw with how often (wait); count tells how
// often it saw one so far.
func hashLoop(p string, stop <-chan struct{}) (count func([32]byte) int, wait func() map[[32]byte]int) {
	seen := map[[32]byte]int{}
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if b, err := os.ReadFile(p); err == nil {
				mu.Lock()
				seen[sha256.Sum256(b)]++
				mu.Unlock()
			} else {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	return func(h [32]byte) int {
			mu.Lock()
			defer mu.Unlock()
			return seen[h]
		}, func() map[[32]byte]int {
			<-done
			mu.Lock()
			defer mu.Unlock()
			return seen
		}
}

// TestWriteBackFullShareRestart: data kept back under a write delegation
// meets a full share when it is sent; the agent is killed, room is made,
// and the agent starts again on its cache. A reader on another agent,
// hashing the file all along, sees the old version or the new and nothing
// else; the new arrives, and no conflict copy is made.
func TestWriteBackFullShareRestart(t *testing.T) {
	d, root := smallShare(t, "tw", "24m")
	old := randomBytes(6, 4<<20)
	if err := os.WriteFile(filepath.Join(root, "f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(root, "filler")
	if err := os.WriteFile(filler, make([]byte, 14<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	cache, mnt := filepath.Join(base, "ca"), filepath.Join(base, "ma")
	a := mountBack(t, d.admin, cache, mnt)
	backChannel(t, a, filepath.Join(mnt, "tw", "small"))
	data := randomBytes(7, 8<<20+11)
	if err := os.WriteFile(filepath.Join(mnt, "tw", "small", "f"), data, 0o644); err != nil {
		t.Fatalf("a close kept back under a delegation failed: %v", err)
	}
	if n := delegStat(t, a, "granted"); n != 1 {
		t.Fatalf("%v write delegations granted, want 1", n)
	}
	// The delegation's timer sends the data, and the share has no room.
	eventually(t, time.Minute, "the write-back meets the full share", func() bool {
		return strings.Contains(a.output(), "no space left")
	})
	if diff := fileDiff(filepath.Join(root, "f"), old); diff != "" {
		t.Fatalf("after a write-back that failed for want of room, the share's file is not the old version: %s", diff)
	}
	a.cmd.Process.Kill()
	<-a.done
	syscall.Unmount(mnt, syscall.MNT_DETACH)
	t.Logf("writer before it was killed:\n%s", a.output())

	b := mountAgent(t, d.admin)
	stop := make(chan struct{})
	count, wait := hashLoop(filepath.Join(b.dir, "tw", "small", "f"), stop)
	oldSum, newSum := sha256.Sum256(old), sha256.Sum256(data)
	// Once the dead writer's delegation has lapsed, the reader reads
	// what the share has: the old version.
	eventually(t, time.Minute, "the reader reads the old version while the writer is dead", func() bool { return count(oldSum) > 0 })
	if diff := fileDiff(filepath.Join(root, "f"), old); diff != "" {
		t.Fatalf("with the writer dead, the share's file is not the old version: %s", diff)
	}
	noStage(t, root)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	a = mountBack(t, d.admin, cache, mnt)
	t.Cleanup(func() { a.unmount(t) })
	eventually(t, time.Minute, "the data kept back reaches the share once there is room", func() bool {
		return sameFile(filepath.Join(root, "f"), data)
	})
	eventually(t, time.Minute, "the reader sees the new version", func() bool {
		got, _ := os.ReadFile(filepath.Join(b.dir, "tw", "small", "f"))
		return sha256.Sum256(got) == newSum
	})
	time.Sleep(500 * time.Millisecond)
	close(stop)
	seen := wait()
	for h, n := range seen {
		if h != oldSum && h != newSum {
			t.Errorf("the reader saw %d times a version that is neither the old nor the new", n)
		}
	}
	t.Logf("reader: %d reads of the old version, %d of the new", seen[oldSum], seen[newSum])
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if strings.Contains(e.Name(), "conflict") {
			t.Errorf("a conflict copy %s was made of the agent's own write-back", e.Name())
		}
	}
	if n := a.stats(t)["conflicts"].(float64); n != 0 {
		t.Errorf("the agent reported %v conflicts for its own write-back:\n%s", n, a.output())
	}
	noStage(t, root)
}

// TestTruncOpenTravelsWithData: a write-back holder opens a file with
// O_TRUNC, writes, closes and is killed before its data is sent. The
// share's file stays the old version (never empty): another agent reads
// it; the new version arrives after the holder's restart.
func TestTruncOpenTravelsWithData(t *testing.T) {
	d := newDomain(t, "tt")
	root := d.addShare("data")
	old := randomBytes(8, 3<<20+1)
	if err := os.WriteFile(filepath.Join(root, "f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	cache, mnt := filepath.Join(base, "ca"), filepath.Join(base, "ma")
	a := mountBack(t, d.admin, cache, mnt)
	backChannel(t, a, filepath.Join(mnt, "tt", "data"))
	p := filepath.Join(mnt, "tt", "data", "f")
	data := randomBytes(9, 1<<20+7)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := fileDiff(filepath.Join(root, "f"), old); diff != "" {
		t.Fatalf("an open with O_TRUNC cut the share's file before any data: %s", diff)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != 0 {
		t.Fatalf("the writer sees %v bytes (%v) after its open with O_TRUNC, want 0", fi.Size(), err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close kept back under a delegation: %v", err)
	}
	if n := delegStat(t, a, "granted"); n != 1 {
		t.Fatalf("%v write delegations granted, want 1", n)
	}
	a.cmd.Process.Kill() // before the delegation's timer sends the data
	<-a.done
	syscall.Unmount(mnt, syscall.MNT_DETACH)
	if strings.Contains(a.output(), "writing f back") {
		t.Logf("the writer sent its data before it was killed:\n%s", a.output())
	}
	if diff := fileDiff(filepath.Join(root, "f"), old); diff != "" {
		t.Fatalf("with the holder dead, the share's file is not the old version: %s", diff)
	}
	b := mountAgent(t, d.admin)
	got, err := os.ReadFile(filepath.Join(b.dir, "tt", "data", "f"))
	if err != nil || !bytes.Equal(got, old) {
		t.Fatalf("with the holder dead, another agent reads %d bytes (%v), not the old version's %d", len(got), err, len(old))
	}
	a = mountBack(t, d.admin, cache, mnt)
	t.Cleanup(func() { a.unmount(t) })
	eventually(t, time.Minute, "the new version reaches the share after the holder's restart", func() bool {
		return sameFile(filepath.Join(root, "f"), data)
	})
	eventually(t, 30*time.Second, "another agent reads the new version", func() bool {
		got, _ := os.ReadFile(filepath.Join(b.dir, "tt", "data", "f"))
		return bytes.Equal(got, data)
	})
	if n := a.stats(t)["conflicts"].(float64); n != 0 {
		t.Errorf("the holder reported %v conflicts for its own data:\n%s", n, a.output())
	}
}

// TestShareCrashMidCommit: the share is killed half way through copying a
// commit into the file. When it starts again it completes the copy from
// the stage before serving anyone: the file is the new version, whole, and
// the agent whose close failed finds its data there, without a conflict.
func TestShareCrashMidCommit(t *testing.T) {
	d := newDomain(t, "tm")
	root := d.addShare("data")
	const point = "share.commit.mid-copy"
	d.shares["data"].stop(t)
	d.startShare("data", fault.Env+"="+point)
	sh := d.shares["data"]
	old := randomBytes(10, 4<<20)
	if err := os.WriteFile(filepath.Join(root, "f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	a := mountAgent(t, d.admin, "--write", "close")
	data := randomBytes(11, 6<<20+9)
	if err := writeFile(filepath.Join(a.dir, "tm", "data", "f"), data); err == nil {
		t.Fatal("close succeeded although the share died in the commit")
	}
	<-sh.done
	if !strings.Contains(sh.output(), "fault: crashing at "+point) {
		t.Fatalf("the share did not crash where it was told:\n%s", sh.output())
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); bytes.Equal(got, old) || bytes.Equal(got, data) {
		t.Fatal("the share crashed before or after the copy, not in it: the test proves nothing")
	}
	d.startShare("data")
	if diff := fileDiff(filepath.Join(root, "f"), data); diff != "" {
		t.Fatalf("the restarted share did not complete the commit: %s\n%s", diff, d.shares["data"].output())
	}
	noStage(t, root)
	settled(t, "the agent holds no unsent data", func() bool { return a.stats(t)["unsent"].(float64) == 0 })
	if n := a.stats(t)["conflicts"].(float64); n != 0 {
		t.Fatalf("the agent's own write-back was reported as %v conflicts:\n%s", n, a.output())
	}
	if diff := fileDiff(filepath.Join(a.dir, "tm", "data", "f"), data); diff != "" {
		t.Fatalf("the mount does not read the new version: %s", diff)
	}
}
