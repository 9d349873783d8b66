package share

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/wire"
)

// TestLocks: a handle's locks conflict with another handle's and with a
// local program's, need the lock right except to release them, refuse
// nonsense, and go when the handle closes.
func TestLocks(t *testing.T) {
	root := t.TempDir()
	for _, n := range []string{"f", "ro"} {
		os.WriteFile(filepath.Join(root, n), []byte("data"), 0o644)
	}
	s, sc := serverWith(t, root, []auth.Grant{
		{Path: "", Rights: auth.All},
		{Path: "ro", Rights: auth.List | auth.Read},
	})
	call := func(op wire.Op, msg, resp any) error {
		t.Helper()
		return serveAs(t, s, sc, op, msg, resp)
	}
	open := func(p string, flags uint32) uint64 {
		t.Helper()
		var r wire.OpenResp
		if err := call(wire.OpOpen, wire.OpenReq{Tok: 1, Path: p, Flags: flags}, &r); err != nil {
			t.Fatal(err)
		}
		return r.Handle
	}
	lock := func(h uint64, typ uint8, start, n int64) error {
		return call(wire.OpLock, wire.LockReq{Tok: 1, Handle: h, Type: typ, Start: start, Len: n}, nil)
	}
	h1, h2 := open("f", wire.OpenRead|wire.OpenWrite), open("f", wire.OpenRead|wire.OpenWrite)

	if err := lock(h1, wire.LockWrite, 0, 10); err != nil {
		t.Fatal(err)
	}
	if err := lock(h2, wire.LockRead, 5, 1); wire.CodeOf(err) != wire.CodeLocked {
		t.Fatalf("a read lock inside another handle's write lock: %v, want CodeLocked", err)
	}
	if err := lock(h2, wire.LockWrite, 10, 0); err != nil {
		t.Fatalf("a lock past the other handle's range: %v", err)
	}
	var probe wire.LockResp
	if err := call(wire.OpLock, wire.LockReq{Tok: 1, Handle: h2, Type: wire.LockWrite, Start: 0, Len: 0, Test: true}, &probe); err != nil ||
		probe.Type != wire.LockWrite || probe.Start != 0 || probe.Len != 10 {
		t.Fatalf("test for a conflict: %+v, %v; want h1's write lock on 0+10", probe, err)
	}

	// A program at the share's machine sees the locks too.
	f, err := os.OpenFile(filepath.Join(root, "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 1}); err == nil {
		t.Fatal("a local program took a write lock over a handle's")
	}

	// Released, and gone with the handle that held them.
	if err := lock(h1, wire.LockUnlock, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := lock(h2, wire.LockRead, 5, 1); err != nil {
		t.Fatalf("a read lock after the write lock was released: %v", err)
	}
	if err := call(wire.OpClose, wire.HandleReq{Tok: 1, Handle: h2}, nil); err != nil {
		t.Fatal(err)
	}
	if err := lock(h1, wire.LockWrite, 0, 0); err != nil {
		t.Fatalf("a lock on the whole file after the other handle closed: %v", err)
	}

	// Rights and nonsense.
	hro := open("ro", wire.OpenRead)
	if err := lock(hro, wire.LockRead, 0, 0); wire.CodeOf(err) != wire.CodeAccess {
		t.Fatalf("a lock without the lock right: %v, want CodeAccess", err)
	}
	if err := lock(hro, wire.LockUnlock, 0, 0); err != nil {
		t.Fatalf("releasing needs no right: %v", err)
	}
	hr := open("f", wire.OpenRead)
	for _, c := range []struct {
		h          uint64
		typ        uint8
		start, len int64
		code       wire.Code
	}{
		{hr, wire.LockWrite, 0, 1, wire.CodeBadHandle}, // a write lock on a read-only handle
		{h1, 7, 0, 1, wire.CodeInvalid},
		{h1, wire.LockRead, -1, 1, wire.CodeInvalid},
		{h1, wire.LockRead, 0, -5, wire.CodeInvalid},
		{h1, wire.LockRead, 1 << 62, 1 << 62, wire.CodeInvalid},
		{999, wire.LockRead, 0, 1, wire.CodeBadHandle},
	} {
		if err := lock(c.h, c.typ, c.start, c.len); wire.CodeOf(err) != c.code {
			t.Errorf("lock %d %d+%d on handle %d: %v, want code %d", c.typ, c.start, c.len, c.h, err, c.code)
		}
	}
}
