package share

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// fuzzServer is a share over a small tree, with a session holding a token
// with every right, so that fuzzed requests reach the file system code.
// Next to its root is a directory outside the share, which symlinks in
// the share point at (as "out" and "up"); fuzzOutside returns it.
func fuzzServer(tb testing.TB) (*Server, *rpc.ServerConn) {
	tb.Helper()
	root := tb.TempDir()
	os.MkdirAll(filepath.Join(root, "d/e"), 0o755)
	os.WriteFile(filepath.Join(root, "d/f"), []byte("file"), 0o644)
	os.Symlink("/etc", filepath.Join(root, "etc"))
	outside := filepath.Join(filepath.Dir(root), "outside")
	os.MkdirAll(filepath.Join(outside, "sub"), 0o755)
	os.WriteFile(filepath.Join(outside, "secret"), []byte("not in the share"), 0o600)
	os.Symlink(outside, filepath.Join(root, "out"))
	os.Symlink("../outside", filepath.Join(root, "up"))
	return serverWith(tb, root, []auth.Grant{{Path: "", Rights: auth.All}})
}

// treeState describes every file below dir: path, mode, size, mtime and
// content, and extended attributes are left out (none are set there).
func treeState(tb testing.TB, dir string) string {
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d %d", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			c, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %x", c)
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return b.String()
}

// serverWith is a share over root with a session holding a token with
// the given grants (slot 1).
func serverWith(tb testing.TB, root string, grants []auth.Grant) (*Server, *rpc.ServerConn) {
	tb.Helper()
	s, login := serverLogin(tb, root, grants)
	return s, login("")
}

// serverLogin is a share over root and a function that opens a connection
// to it holding a token with the given grants (slot 1), in the agent
// session named by its argument ("": none).
func serverLogin(tb testing.TB, root string, grants []auth.Grant) (*Server, func(session string) *rpc.ServerConn) {
	tb.Helper()
	pub, priv, err := auth.NewTokenKey()
	if err != nil {
		tb.Fatal(err)
	}
	s, err := New(Config{Name: "fz", Domain: "fuzz", Root: root, TokenKey: pub})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	now := time.Now()
	tok := &auth.Token{ID: "t", Principal: "admin@fuzz", Share: "fz", Grants: grants,
		Issued: now, Expires: now.Add(time.Hour)}
	signed, err := auth.SignToken(priv, tok)
	if err != nil {
		tb.Fatal(err)
	}
	login := func(name string) *rpc.ServerConn {
		sc := &rpc.ServerConn{State: &session{peer: auth.Identity{Domain: "fuzz", Role: auth.RoleUser, Name: "admin"}}}
		meta, _ := wire.Marshal(wire.AuthReq{Token: signed, Session: name})
		if _, err := s.Serve(context.Background(), &rpc.Request{Op: wire.OpAuth, Meta: meta, Conn: sc}); err != nil {
			tb.Fatal(err)
		}
		return sc
	}
	return s, login
}

// serveAs sends one request on sc and decodes the reply into resp (if
// not nil); a refusal must be a *wire.Error, which it returns.
func serveAs(tb testing.TB, s *Server, sc *rpc.ServerConn, op wire.Op, msg, resp any) error {
	tb.Helper()
	meta, err := wire.Marshal(msg)
	if err != nil {
		tb.Fatal(err)
	}
	rep, err := s.Serve(context.Background(), &rpc.Request{Op: op, Meta: meta, Conn: sc})
	if err != nil {
		if _, ok := err.(*wire.Error); !ok {
			tb.Fatalf("%s: error of type %T: %v", op, err, err)
		}
		return err
	}
	if resp != nil {
		b, _ := wire.Marshal(rep.Msg)
		if err := wire.Unmarshal(b, resp); err != nil {
			tb.Fatal(err)
		}
	}
	return nil
}

// FuzzServeRequest sends arbitrary ops and meta to a share: it must answer
// every one with a reply or a *wire.Error, never panic, and never touch
// anything outside its root, however the request names it (through "..",
// absolute paths, or the symlinks "out" and "up" that point outside).
func FuzzServeRequest(f *testing.F) {
	seeds := []struct {
		op  wire.Op
		msg any
	}{
		{wire.OpGetAttr, wire.PathReq{Tok: 1, Path: "d/f"}},
		{wire.OpReadDir, wire.PathReq{Tok: 1, Path: "d"}},
		{wire.OpGetAttr, wire.PathReq{Tok: 1, Path: "../../etc/passwd"}},
		{wire.OpReadDir, wire.PathReq{Tok: 1, Path: "etc"}},
		{wire.OpReadDir, wire.ReadDirReq{Tok: 1, Path: "d", DataMax: 1 << 31, DataBudget: 1 << 31}},
		{wire.OpOpen, wire.OpenReq{Tok: 1, Path: "d/f", Flags: wire.OpenRead}},
		{wire.OpCreate, wire.OpenReq{Tok: 1, Path: "d/new", Flags: wire.OpenWrite, Mode: 0o644}},
		{wire.OpRead, wire.ReadReq{Tok: 1, Handle: 3, Offset: -1, Length: 1 << 30}},
		{wire.OpRename, wire.RenameReq{Tok: 1, Old: "d/f", New: "etc/x"}},
		{wire.OpSymlink, wire.SymlinkReq{Tok: 1, Path: "d/l", Target: "/etc/shadow"}},
		{wire.OpSetAttr, wire.SetAttrReq{Tok: 1, Path: "d/f", Valid: wire.SetMode | wire.SetSize, Mode: 0o7777, Size: -5}},
		{wire.OpTruncate, wire.TruncateReq{Tok: 1, Path: "d/f", Size: 1 << 40}},
		{wire.OpLink, wire.RenameReq{Tok: 1, Old: "etc/passwd", New: "d/p"}},
		{wire.OpRmdir, wire.PathReq{Tok: 1, Path: ""}},
		{wire.OpSum, wire.SumReq{Tok: 1, Handle: 3, Offset: 0, Length: 1 << 40, Block: 0}},
		{wire.OpGetFile, wire.GetFileReq{Tok: 1, Path: "etc/passwd", Max: 1 << 31}},
		{wire.OpPutFile, wire.PutFileReq{Tok: 1, Path: "d/../x", Mode: 0o7777}},
		{wire.OpPutFile, wire.PutFileReq{Tok: 1, Path: "d/e", Excl: true}},
		{wire.OpPush, wire.PushReq{Tok: 1, Path: "d/f", Length: 4, Block: 1, DestPath: "/x/y"}},
		{wire.OpTicket, wire.TicketReq{Protection: "clear"}},
		{wire.OpGetInv, wire.GetInvReq{Tok: 1, Session: "s", Since: 1}},
		{wire.OpGetXattr, wire.XattrReq{Tok: 1, Path: "etc/passwd", Name: "user.a"}},
		{wire.OpListXattr, wire.PathReq{Tok: 1, Path: "etc"}},
		{wire.OpSetXattr, wire.SetXattrReq{Tok: 1, Path: "d/f", Name: "user.a", Value: []byte("v"), Flags: wire.XattrCreate}},
		{wire.OpSetXattr, wire.SetXattrReq{Tok: 1, Path: "d/../etc", Name: "security.capability", Flags: 7}},
		{wire.OpRemoveXattr, wire.XattrReq{Tok: 1, Path: "", Name: "user."}},
		{wire.OpLock, wire.LockReq{Tok: 1, Handle: 1, Type: wire.LockWrite, Start: -1, Len: 1 << 62}},
		{wire.OpPutFile, wire.PutFileReq{Tok: 1, Path: "out/secret", Mode: 0o644}},
		{wire.OpCreate, wire.OpenReq{Tok: 1, Path: "up/new", Flags: wire.OpenWrite | wire.OpenFollow, Mode: 0o644}},
		{wire.OpSetAttr, wire.SetAttrReq{Tok: 1, Path: "out/secret", Valid: wire.SetMode, Mode: 0o4777}},
		{wire.OpUnlink, wire.PathReq{Tok: 1, Path: "up/secret"}},
		{wire.OpRename, wire.RenameReq{Tok: 1, Old: "d/f", New: "out/f"}},
		{wire.OpMkdir, wire.MkdirReq{Tok: 1, Path: "up/sub/x", Mode: 0o755}},
		{wire.OpMknod, wire.MknodReq{Tok: 1, Path: "up/sub/f", Mode: 0o10644}},
		{wire.OpSetXattr, wire.SetXattrReq{Tok: 1, Path: "out/secret", Name: "user.a", Value: []byte("v")}},
		{wire.OpStage, wire.HandleReq{Tok: 1, Handle: 1}},
		{wire.OpCommit, wire.CommitReq{Tok: 1, Handle: 1, Size: -1, Mtime: 1}},
		{wire.OpValidate, wire.ValidateReq{Tok: 1, Dirs: []wire.DirCheck{{Path: "d", Sum: make([]byte, wire.ListingSumSize)},
			{Path: "out", Sum: make([]byte, wire.ListingSumSize)}, {Path: "up/sub", Sum: make([]byte, wire.ListingSumSize)}}}},
		{wire.OpValidate, wire.ValidateReq{Tok: 1, Dirs: []wire.DirCheck{{Path: "../x", Sum: []byte{1}}}}},
	}
	for _, s := range seeds {
		b, err := wire.Marshal(s.msg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint16(s.op), b)
	}
	s, sc := fuzzServer(f)
	outside := filepath.Join(filepath.Dir(s.cfg.Root), "outside")
	before := treeState(f, outside)
	f.Fuzz(func(t *testing.T, op uint16, meta []byte) {
		if tooBig(wire.Op(op), meta) {
			return
		}
		rep, err := s.Serve(context.Background(), &rpc.Request{Op: wire.Op(op), Meta: meta, Conn: sc, Data: []byte("data")})
		if rep.Release != nil {
			rep.Release()
		}
		if err != nil {
			if _, ok := err.(*wire.Error); !ok {
				t.Fatalf("op %d: error of type %T: %v", op, err, err)
			}
		}
		if after := treeState(t, outside); after != before {
			t.Fatalf("op %s (%v) changed files outside the share:\n%s\n%s", wire.Op(op), err, before, after)
		}
	})
}

func TestServeRejectsEscapes(t *testing.T) {
	s, sc := fuzzServer(t)
	for _, p := range []string{"..", "../x", "d/../../x", "/etc", "etc/passwd", "d//f", "./d"} {
		meta, _ := wire.Marshal(wire.PathReq{Tok: 1, Path: p})
		_, err := s.Serve(context.Background(), &rpc.Request{Op: wire.OpGetAttr, Meta: meta, Conn: sc})
		if wire.CodeOf(err) != wire.CodeEscape {
			t.Errorf("getattr %q: %v", p, err)
		}
	}
}

// tooBig keeps the fuzzer from filling the disk with huge sparse files;
// sizes and offsets are covered by their own tests.
func tooBig(op wire.Op, meta []byte) bool {
	const limit = 1 << 20
	switch op {
	case wire.OpTruncate:
		var r wire.TruncateReq
		return wire.Unmarshal(meta, &r) == nil && r.Size > limit
	case wire.OpSetAttr:
		var r wire.SetAttrReq
		return wire.Unmarshal(meta, &r) == nil && r.Size > limit
	case wire.OpWrite:
		var r wire.WriteReq
		return wire.Unmarshal(meta, &r) == nil && r.Offset > limit
	case wire.OpGetInv: // a long poll only waits; the wait is tested on its own
		var r wire.GetInvReq
		return wire.Unmarshal(meta, &r) == nil && r.Wait > 0
	}
	return false
}
