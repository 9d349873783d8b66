package share

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/testenv/snap"
	"pando.dev/pando/internal/wire"
)

// symlinkShare is a share where the session may do everything in alice/,
// read pub/, and only see names elsewhere (secret/, hidden/).
func symlinkShare(t *testing.T) (string, func(op wire.Op, msg, resp any) error) {
	root := t.TempDir()
	for _, d := range []string{"alice", "secret", "hidden", "pub"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "secret/s.txt"), []byte("secret"), 0o644)
	os.WriteFile(filepath.Join(root, "hidden/h.txt"), []byte("hidden"), 0o644)
	os.WriteFile(filepath.Join(root, "pub/p.txt"), []byte("public"), 0o644)
	os.Symlink("../secret", filepath.Join(root, "alice/alias"))
	os.Symlink("../secret/s.txt", filepath.Join(root, "alice/s.txt"))
	os.Symlink("../pub", filepath.Join(root, "alice/pub"))
	os.Symlink("/etc", filepath.Join(root, "alice/etc"))
	os.Symlink("../../..", filepath.Join(root, "alice/up"))
	os.Symlink("loop2", filepath.Join(root, "alice/loop1"))
	os.Symlink("loop1", filepath.Join(root, "alice/loop2"))
	s, sc := serverWith(t, root, []auth.Grant{
		{Path: "", Rights: auth.List},
		{Path: "secret", Rights: 0},
		{Path: "alice", Rights: auth.All},
		{Path: "pub", Rights: auth.List | auth.Read},
	})
	return root, func(op wire.Op, msg, resp any) error { return serveAs(t, s, sc, op, msg, resp) }
}

// TestSymlinkRightsOnTarget: a symlink inside the share is followed only
// with the rights its target needs, however the request names it.
func TestSymlinkRightsOnTarget(t *testing.T) {
	root, call := symlinkShare(t)
	before := snap.Take(t, root)
	refused := []struct {
		name string
		op   wire.Op
		msg  any
		code wire.Code
	}{
		{"getattr through a directory link", wire.OpGetAttr, wire.PathReq{Tok: 1, Path: "alice/alias/s.txt"}, wire.CodeAccess},
		{"open through a directory link", wire.OpOpen, wire.OpenReq{Tok: 1, Path: "alice/alias/s.txt", Flags: wire.OpenRead}, wire.CodeAccess},
		{"open a file link, followed", wire.OpOpen, wire.OpenReq{Tok: 1, Path: "alice/s.txt", Flags: wire.OpenRead | wire.OpenFollow}, wire.CodeAccess},
		{"open a file link, not followed", wire.OpOpen, wire.OpenReq{Tok: 1, Path: "alice/s.txt", Flags: wire.OpenRead}, wire.CodeLoop},
		{"getfile through a link", wire.OpGetFile, wire.GetFileReq{Tok: 1, Path: "alice/alias/s.txt", Max: 100}, wire.CodeAccess},
		{"getfile of a file link", wire.OpGetFile, wire.GetFileReq{Tok: 1, Path: "alice/s.txt", Max: 100}, wire.CodeAccess},
		{"putfile through a link", wire.OpPutFile, wire.PutFileReq{Tok: 1, Path: "alice/alias/x", Mode: 0o644}, wire.CodeAccess},
		{"putfile over a file link", wire.OpPutFile, wire.PutFileReq{Tok: 1, Path: "alice/s.txt", Mode: 0o644}, wire.CodeAccess},
		{"create through a link", wire.OpCreate, wire.OpenReq{Tok: 1, Path: "alice/alias/x", Flags: wire.OpenWrite, Mode: 0o644}, wire.CodeAccess},
		{"truncate through a link", wire.OpTruncate, wire.TruncateReq{Tok: 1, Path: "alice/alias/s.txt"}, wire.CodeAccess},
		{"truncate a file link", wire.OpTruncate, wire.TruncateReq{Tok: 1, Path: "alice/s.txt"}, wire.CodeLoop},
		{"chmod a file link", wire.OpSetAttr, wire.SetAttrReq{Tok: 1, Path: "alice/s.txt", Valid: wire.SetMode, Mode: 0o777}, wire.CodeLoop},
		{"unlink through a link", wire.OpUnlink, wire.PathReq{Tok: 1, Path: "alice/alias/s.txt"}, wire.CodeAccess},
		{"mkdir through a link", wire.OpMkdir, wire.MkdirReq{Tok: 1, Path: "alice/alias/d", Mode: 0o755}, wire.CodeAccess},
		{"symlink through a link", wire.OpSymlink, wire.SymlinkReq{Tok: 1, Path: "alice/alias/l", Target: "x"}, wire.CodeAccess},
		{"rename out through a link", wire.OpRename, wire.RenameReq{Tok: 1, Old: "alice/alias/s.txt", New: "alice/got"}, wire.CodeAccess},
		{"rename in through a link", wire.OpRename, wire.RenameReq{Tok: 1, Old: "alice/pub", New: "alice/alias/pub"}, wire.CodeAccess},
		{"link through a link", wire.OpLink, wire.RenameReq{Tok: 1, Old: "alice/alias/s.txt", New: "alice/got"}, wire.CodeAccess},
		{"setxattr through a link", wire.OpSetXattr, wire.SetXattrReq{Tok: 1, Path: "alice/alias/s.txt", Name: "user.x", Value: []byte("v")}, wire.CodeAccess},
		{"getxattr through a link", wire.OpGetXattr, wire.XattrReq{Tok: 1, Path: "alice/alias/s.txt", Name: "user.x"}, wire.CodeAccess},
		{"readdir through a link", wire.OpReadDir, wire.ReadDirReq{Tok: 1, Path: "alice/alias"}, wire.CodeAccess},
		{"an absolute link", wire.OpGetAttr, wire.PathReq{Tok: 1, Path: "alice/etc/passwd"}, wire.CodeEscape},
		{"a link above the root", wire.OpGetAttr, wire.PathReq{Tok: 1, Path: "alice/up/x"}, wire.CodeEscape},
		{"a loop", wire.OpGetAttr, wire.PathReq{Tok: 1, Path: "alice/loop1/x"}, wire.CodeLoop},
		{"a hard link to a file only listed", wire.OpLink, wire.RenameReq{Tok: 1, Old: "hidden/h.txt", New: "alice/h.txt"}, wire.CodeAccess},
		{"a hard link to a file only read", wire.OpLink, wire.RenameReq{Tok: 1, Old: "pub/p.txt", New: "alice/p.txt"}, wire.CodeAccess},
	}
	for _, c := range refused {
		err := call(c.op, c.msg, nil)
		if wire.CodeOf(err) != c.code {
			t.Errorf("%s: got %v (code %d), want code %d", c.name, err, wire.CodeOf(err), c.code)
			continue
		}
		if c.code == wire.CodeAccess && strings.Contains(c.name, "through") && !strings.Contains(err.Error(), "symlink") {
			t.Errorf("%s: the refusal does not say a symlink led there: %v", c.name, err)
		}
	}
	snap.Same(t, "a refused request", before, snap.Take(t, root))

	// What the link's target allows, it allows.
	var got wire.GetFileResp
	if err := call(wire.OpGetFile, wire.GetFileReq{Tok: 1, Path: "alice/pub/p.txt", Max: 100}, &got); err != nil {
		t.Fatalf("a file read through a link to a readable directory: %v", err)
	}
	var list wire.ReadDirResp
	if err := call(wire.OpReadDir, wire.ReadDirReq{Tok: 1, Path: "alice/pub"}, &list); err != nil || len(list.Entries) != 1 {
		t.Fatalf("a listing through a link to a listable directory: %v %v", err, list.Entries)
	}
	var a wire.AttrResp
	if err := call(wire.OpGetAttr, wire.PathReq{Tok: 1, Path: "alice/alias"}, &a); err != nil || a.Attr.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		t.Fatalf("the link itself: %v, mode %o", err, a.Attr.Mode)
	}
	if err := call(wire.OpUnlink, wire.PathReq{Tok: 1, Path: "alice/alias"}, nil); err != nil {
		t.Fatalf("removing the link itself: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "secret/s.txt")); err != nil {
		t.Fatalf("removing a link removed its target: %v", err)
	}
}

// TestSwappedDirectoryNotFollowed: an operation on a resolved path never
// follows a symlink that replaced one of its directories since.
func TestSwappedDirectoryNotFollowed(t *testing.T) {
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, "secret"), 0o755)
	os.WriteFile(filepath.Join(root, "secret/s.txt"), []byte("secret"), 0o644)
	os.Symlink("secret", filepath.Join(root, "d"))
	tr, err := openTree(root)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.close()
	if f, err := tr.openFile("d/s.txt", os.O_RDONLY, 0); err == nil || !strings.Contains(err.Error(), "too many levels") {
		if f != nil {
			f.Close()
		}
		t.Fatalf("open below a symlinked directory: %v", err)
	}
	if err := tr.chmod("d/s.txt", 0o777); err == nil {
		t.Fatal("chmod below a symlinked directory followed it")
	}
	if err := tr.remove("d/s.txt", false); err == nil {
		t.Fatal("remove below a symlinked directory followed it")
	}
	if _, err := os.Stat(filepath.Join(root, "secret/s.txt")); err != nil {
		t.Fatal(err)
	}
}

// TestNoSetIDFromClients: setuid and setgid bits asked for by a client are
// dropped unless the operator allows them, and what a share running as
// root creates is not root's.
func TestNoSetIDFromClients(t *testing.T) {
	for _, allow := range []bool{false, true} {
		root := t.TempDir()
		s, sc := serverWith(t, root, []auth.Grant{{Path: "", Rights: auth.All}})
		s.cfg.AllowSetID = allow
		call := func(op wire.Op, msg any) {
			t.Helper()
			if err := serveAs(t, s, sc, op, msg, nil); err != nil {
				t.Fatalf("%s: %v", op, err)
			}
		}
		var h wire.OpenResp
		if err := serveAs(t, s, sc, wire.OpCreate, wire.OpenReq{Tok: 1, Path: "f", Flags: wire.OpenWrite, Mode: 0o6755}, &h); err != nil {
			t.Fatal(err)
		}
		call(wire.OpClose, wire.HandleReq{Handle: h.Handle})
		call(wire.OpPutFile, wire.PutFileReq{Tok: 1, Path: "p", Mode: 0o6755})
		call(wire.OpMkdir, wire.MkdirReq{Tok: 1, Path: "d", Mode: 0o3755})
		os.WriteFile(filepath.Join(root, "c"), nil, 0o755)
		call(wire.OpSetAttr, wire.SetAttrReq{Tok: 1, Path: "c", Valid: wire.SetMode, Mode: 0o6755})
		for _, n := range []string{"f", "p", "d", "c"} {
			var st syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(root, n), &st); err != nil {
				t.Fatal(err)
			}
			setid := st.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0
			if setid != allow && !(allow && n == "d") {
				t.Errorf("allow=%v: %s has mode %o", allow, n, st.Mode&0o7777)
			}
			if n != "c" && os.Geteuid() == 0 && st.Uid == 0 {
				t.Errorf("%s, made by a client of a share running as root, belongs to root", n)
			}
		}
	}
}

// TestListRootAgain: every listing of the share's root lists it whole (a
// descriptor shared between listings would start where the last ended).
func TestListRootAgain(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "f"), nil, 0o644)
	s, sc := serverWith(t, root, []auth.Grant{{Path: "", Rights: auth.All}})
	for i := 0; i < 3; i++ {
		var l wire.ReadDirResp
		if err := serveAs(t, s, sc, wire.OpReadDir, wire.ReadDirReq{Tok: 1, Path: ""}, &l); err != nil || len(l.Entries) != 1 {
			t.Fatalf("listing %d of the root: %v, %d entries", i, err, len(l.Entries))
		}
	}
}
