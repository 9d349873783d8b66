package share

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// limited serves one request through the limits, as connections do.
func limited(s *Server, sc *rpc.ServerConn, op wire.Op, msg any, data []byte, resp any) error {
	meta, _ := wire.Marshal(msg)
	rep, err := s.serveLimited(context.Background(), &rpc.Request{Op: op, Meta: meta, Data: data, Conn: sc})
	if err == nil && resp != nil {
		b, _ := wire.Marshal(rep.Msg)
		err = wire.Unmarshal(b, resp)
	}
	return err
}

// TestUsageReturnsToZero: what a principal holds is counted as it opens
// files and serves requests, and given back when files close, opens fail
// and its connection ends: the limits never drift.
func TestUsageReturnsToZero(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "f"), []byte("file"), 0o644)
	s, sc := serverWith(t, root, []auth.Grant{{Path: "", Rights: auth.All}})
	var handles []uint64
	for range 3 {
		var r wire.OpenResp
		if err := limited(s, sc, wire.OpOpen, wire.OpenReq{Tok: 1, Path: "f", Flags: wire.OpenRead | wire.OpenWrite}, nil, &r); err != nil {
			t.Fatal(err)
		}
		handles = append(handles, r.Handle)
	}
	if err := limited(s, sc, wire.OpOpen, wire.OpenReq{Tok: 1, Path: "missing", Flags: wire.OpenRead}, nil, nil); wire.CodeOf(err) != wire.CodeNotExist {
		t.Fatalf("open of a missing file: %v", err)
	}
	if err := limited(s, sc, wire.OpWrite, wire.WriteReq{Tok: 1, Handle: handles[0]}, []byte("FI"), nil); err != nil {
		t.Fatal(err)
	}
	if h, _, r, p := s.Usage("admin@fuzz"); h != 3 || r != 0 || p != 0 {
		t.Errorf("after 3 opens, a failed one and a write: %d files, %d requests, %d bytes pending; want 3, 0, 0", h, r, p)
	}
	if err := limited(s, sc, wire.OpClose, wire.HandleReq{Handle: handles[0]}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := limited(s, sc, wire.OpClose, wire.HandleReq{Handle: handles[0]}, nil, nil); wire.CodeOf(err) != wire.CodeBadHandle {
		t.Fatalf("a second close: %v", err)
	}
	if h, _, _, _ := s.Usage("admin@fuzz"); h != 2 {
		t.Errorf("after a close (and a second close of the same handle): %d files, want 2", h)
	}
	s.Closed(sc) // the connection ends: its handles close
	if h, c, r, p := s.Usage("admin@fuzz"); h != 0 || c != 0 || r != 0 || p != 0 {
		t.Errorf("after the connection ended: %d %d %d %d, want nothing", h, c, r, p)
	}
	s.mu.Lock()
	left, open := len(s.use), s.openHandles
	s.mu.Unlock()
	if left != 0 || open != 0 {
		t.Errorf("%d principals and %d files still counted", left, open)
	}
}

// TestPendingWriteLimit: a write that would take a principal's pending
// write data past the limit is refused (ENOBUFS) with a sentence naming
// it, and writes nothing; another principal's write goes through.
func TestPendingWriteLimit(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "f"), []byte("file"), 0o644)
	s, sc := serverWith(t, root, []auth.Grant{{Path: "", Rights: auth.All}})
	var r wire.OpenResp
	if err := limited(s, sc, wire.OpOpen, wire.OpenReq{Tok: 1, Path: "f", Flags: wire.OpenWrite}, nil, &r); err != nil {
		t.Fatal(err)
	}
	// Writes of others in flight hold all but 100 bytes of the limit.
	s.mu.Lock()
	s.usageLocked("admin@fuzz").pending = s.limits.PendingWrites - 100
	s.mu.Unlock()
	err := limited(s, sc, wire.OpWrite, wire.WriteReq{Tok: 1, Handle: r.Handle}, []byte(strings.Repeat("x", 200)), nil)
	if wire.CodeOf(err) != wire.CodeNoBufs {
		t.Fatalf("a write past the limit: %v", err)
	}
	for _, want := range []string{"admin@fuzz has 256.0 MiB of writes in progress at share fz", "200 bytes more", "the limit of 256 MiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); string(got) != "file" {
		t.Errorf("a refused write changed the file: %q", got)
	}
	// Another principal is not concerned.
	other := &rpc.ServerConn{State: &session{peer: auth.Identity{Domain: "fuzz", Role: auth.RoleUser, Name: "other"}}}
	if err := limited(s, other, wire.OpPing, wire.Empty{}, nil, nil); err != nil {
		t.Errorf("another principal's request: %v", err)
	}
	// Once the others are written, the write goes through.
	s.mu.Lock()
	s.usageLocked("admin@fuzz").pending = 0
	s.mu.Unlock()
	if err := limited(s, sc, wire.OpWrite, wire.WriteReq{Tok: 1, Handle: r.Handle}, []byte("FI"), nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); string(got) != "FIle" {
		t.Errorf("the write: %q", got)
	}
}

// TestTotalOpenFileLimit: past the files all principals together may
// have open, an open is refused with ENFILE and a sentence naming the
// share; a close makes room. The descriptor limit was raised to the
// hard one and the total kept to half of it.
func TestTotalOpenFileLimit(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "f"), []byte("file"), 0o644)
	s, sc := serverWith(t, root, []auth.Grant{{Path: "", Rights: auth.All}})
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur != rl.Max && rl.Max <= 1<<20 { // above nr_open it cannot be raised
		t.Errorf("descriptor limit %d, not raised to %d", rl.Cur, rl.Max)
	}
	if total := s.limits.TotalHandles; total < 1 || uint64(total) > rl.Cur/2 {
		t.Errorf("total of open files %d, want at most half of %d", total, rl.Cur)
	}
	s.mu.Lock()
	s.limits.TotalHandles = 2
	s.mu.Unlock()
	var h [2]wire.OpenResp
	for i := range h {
		if err := limited(s, sc, wire.OpOpen, wire.OpenReq{Tok: 1, Path: "f", Flags: wire.OpenRead}, nil, &h[i]); err != nil {
			t.Fatal(err)
		}
	}
	err := limited(s, sc, wire.OpOpen, wire.OpenReq{Tok: 1, Path: "f", Flags: wire.OpenRead}, nil, nil)
	if wire.CodeOf(err) != wire.CodeTableFull || !strings.Contains(err.Error(), "share fz has 2 files open, as many as it may") {
		t.Fatalf("an open past the share's total: %v", err)
	}
	if err := limited(s, sc, wire.OpClose, wire.HandleReq{Handle: h[0].Handle}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := limited(s, sc, wire.OpOpen, wire.OpenReq{Tok: 1, Path: "f", Flags: wire.OpenRead}, nil, nil); err != nil {
		t.Errorf("an open after a close: %v", err)
	}
}
