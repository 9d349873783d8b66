package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// wholeFile is an fcntl lock of type typ on the whole file.
func wholeFile(typ int16) *unix.Flock_t {
	return &unix.Flock_t{Type: typ, Whence: 0, Start: 0, Len: 0}
}

// TestLocksAcrossAgents: fcntl and flock locks taken through one agent
// hold against another agent, go with the first close (fcntl) or the last
// (flock) and with the agent that held them, need the lock right, and a
// lock taken after another agent's writes reads those writes even under a
// long coherence window.
func TestLocksAcrossAgents(t *testing.T) {
	d := newDomain(t, "lk")
	root := d.addShare("data")
	os.WriteFile(filepath.Join(root, "f"), []byte("v1"), 0o644)
	a := mountAgent(t, d.admin, "--consistency", "window=60s")
	b := mountAgent(t, d.admin, "--consistency", "window=60s")
	pa, pb := filepath.Join(a.dir, "lk", "data", "f"), filepath.Join(b.dir, "lk", "data", "f")
	if got, err := os.ReadFile(pb); err != nil || string(got) != "v1" {
		t.Fatalf("b reads %q, %v", got, err)
	}

	fa, err := os.OpenFile(pa, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.FcntlFlock(fa.Fd(), unix.F_SETLK, wholeFile(unix.F_WRLCK)); err != nil {
		t.Fatalf("a's write lock: %v", err)
	}
	fb, err := os.OpenFile(pb, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	if err := unix.FcntlFlock(fb.Fd(), unix.F_SETLK, wholeFile(unix.F_RDLCK)); !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EACCES) {
		t.Fatalf("b's read lock while a holds a write lock: %v, want EAGAIN", err)
	}
	probe := wholeFile(unix.F_RDLCK)
	if err := unix.FcntlFlock(fb.Fd(), unix.F_GETLK, probe); err != nil || probe.Type != unix.F_WRLCK {
		t.Fatalf("b's F_GETLK: type %d, %v; want the write lock (%d)", probe.Type, err, unix.F_WRLCK)
	}

	// b waits for the lock; a writes under it and closes, which releases it.
	got := make(chan error, 1)
	go func() { got <- unix.FcntlFlock(fb.Fd(), unix.F_SETLKW, wholeFile(unix.F_WRLCK)) }()
	select {
	case err := <-got:
		t.Fatalf("b's F_SETLKW returned (%v) while a held the lock", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := fa.WriteAt([]byte("v2 written under the lock"), 0); err != nil {
		t.Fatal(err)
	}
	fa.Close()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("b's F_SETLKW: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b's F_SETLKW still waits 10 s after a closed the file")
	}
	buf := make([]byte, 64)
	n, _ := fb.ReadAt(buf, 0)
	if string(buf[:n]) != "v2 written under the lock" {
		t.Fatalf("b reads %q under the lock a released after writing, within b's 60 s window", buf[:n])
	}
	if err := unix.FcntlFlock(fb.Fd(), unix.F_SETLK, wholeFile(unix.F_UNLCK)); err != nil {
		t.Fatalf("b's unlock: %v", err)
	}

	// flock: held until the last close of the open file, even when a
	// duplicate descriptor closes first.
	fa, err = os.Open(pa)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(fa.Fd()), unix.LOCK_EX); err != nil {
		t.Fatalf("a's flock: %v", err)
	}
	dup, err := unix.Dup(int(fa.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(dup)
	if err := unix.Flock(int(fb.Fd()), unix.LOCK_SH|unix.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("b's flock while a holds one: %v, want EWOULDBLOCK", err)
	}
	fa.Close()
	// The kernel sends the last close to the agent after close(2) returns.
	retry(t, "b's flock after a closed the file", func() error { return unix.Flock(int(fb.Fd()), unix.LOCK_SH|unix.LOCK_NB) })
	if err := unix.Flock(int(fb.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}

	// A lock goes with the agent that held it.
	c := mountAgent(t, d.admin)
	fc, err := os.OpenFile(filepath.Join(c.dir, "lk", "data", "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.FcntlFlock(fc.Fd(), unix.F_SETLK, wholeFile(unix.F_WRLCK)); err != nil {
		t.Fatalf("c's write lock: %v", err)
	}
	c.cmd.Process.Kill()
	<-c.done
	fc.Close()
	syscall.Unmount(c.dir, syscall.MNT_DETACH) // the dead mount it left
	retry(t, "b's lock after the agent holding one was killed", func() error {
		return unix.FcntlFlock(fb.Fd(), unix.F_SETLK, wholeFile(unix.F_WRLCK))
	})

	// Locking needs the lock right (k), which read does not grant.
	alice := d.addUser("alice")
	d.pando(d.admin, "acl", "set", "/lk/data", "alice", "read").ok()
	e := mountAgent(t, alice)
	fe, err := os.Open(filepath.Join(e.dir, "lk", "data", "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer fe.Close()
	if err := unix.FcntlFlock(fe.Fd(), unix.F_SETLK, wholeFile(unix.F_RDLCK)); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("a lock without the lock right: %v, want EACCES", err)
	}
}

// retry calls fn until it succeeds, failing the test after 10 s.
func retry(t *testing.T, what string, fn func() error) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %v after 10 s", what, err)
		}
	}
}
