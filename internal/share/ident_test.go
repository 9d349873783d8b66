package share

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/wire"
)

// TestOwnerRecord: what a client makes has the owner and group it asked
// (its principal by default, or a local id), kept beside the file and not
// as the real file's owner; a claim of another principal's name, a chown
// to another owner and a chgrp of a file the principal does not own are
// refused without the administer right, with nothing changed; with it
// they stick; a directory's setuid and setgid bits are kept as a record.
func TestOwnerRecord(t *testing.T) {
	root := t.TempDir()
	rw := auth.All &^ auth.Admin
	s, sc := serverWith(t, root, []auth.Grant{{Path: "", Rights: rw}, {Path: "adm", Rights: auth.All}})
	if err := os.Mkdir(filepath.Join(root, "adm"), 0o755); err != nil {
		t.Fatal(err)
	}
	getattr := func(p string) wire.Attr {
		t.Helper()
		var a wire.AttrResp
		if err := serveAs(t, s, sc, wire.OpGetAttr, wire.PathReq{Tok: 1, Path: p}, &a); err != nil {
			t.Fatalf("getattr %s: %v", p, err)
		}
		return a.Attr
	}
	var a wire.AttrResp
	if err := serveAs(t, s, sc, wire.OpMkdir, wire.MkdirReq{Tok: 1, Path: "d", Mode: 0o755}, &a); err != nil {
		t.Fatal(err)
	}
	if a.Attr.Owner != "admin@fuzz" || a.Attr.Group != "" {
		t.Errorf("mkdir without an owner asked: owner %q group %q, want the principal's and none", a.Attr.Owner, a.Attr.Group)
	}
	if err := serveAs(t, s, sc, wire.OpCreate, wire.OpenReq{Tok: 1, Path: "d/f", Flags: wire.OpenWrite, Mode: 0o644, Owner: "#65534", Group: "#65533"}, nil); err != nil {
		t.Fatal(err)
	}
	if g := getattr("d/f"); g.Owner != "#65534" || g.Group != "#65533" {
		t.Errorf("a file made for #65534:#65533 shows %q:%q", g.Owner, g.Group)
	}
	if err := serveAs(t, s, sc, wire.OpSymlink, wire.SymlinkReq{Tok: 1, Path: "d/l", Target: "f", Owner: "#7"}, &a); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 && a.Attr.Owner != "#7" {
		t.Errorf("a symlink made for #7 shows owner %q (a share running as root keeps it)", a.Attr.Owner)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, "d/f"), &st); err != nil {
		t.Fatal(err)
	}
	if s.owner != nil && (int(st.Uid) != s.owner.uid || int(st.Gid) != s.owner.gid) {
		t.Errorf("the share's file has uid %d gid %d, not its owner account's %d:%d", st.Uid, st.Gid, s.owner.uid, s.owner.gid)
	}
	refused := func(what string, op wire.Op, msg any, p string) {
		t.Helper()
		before := getattr(p)
		err := serveAs(t, s, sc, op, msg, nil)
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodePerm {
			t.Errorf("%s: %v, want EPERM", what, err)
		}
		if after := getattr(p); after != before {
			t.Errorf("%s, refused, changed %+v to %+v", what, before, after)
		}
	}
	refused("a file made for bob@fuzz", wire.OpCreate, wire.OpenReq{Tok: 1, Path: "d/g", Flags: wire.OpenWrite, Mode: 0o644, Owner: "bob@fuzz"}, "d")
	if _, err := os.Lstat(filepath.Join(root, "d/g")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused create made d/g: %v", err)
	}
	refused("chown to bob@fuzz", wire.OpSetAttr, wire.SetAttrReq{Tok: 1, Path: "d", Valid: wire.SetOwner, Owner: "bob@fuzz"}, "d")
	refused("chown to #0", wire.OpSetAttr, wire.SetAttrReq{Tok: 1, Path: "d/f", Valid: wire.SetOwner, Owner: "#0"}, "d/f")
	refused("chgrp of a file another owns", wire.OpSetAttr, wire.SetAttrReq{Tok: 1, Path: "d/f", Valid: wire.SetGroup, Group: "staff"}, "d/f")
	// Its own file: a chgrp is the owner's to make.
	if err := serveAs(t, s, sc, wire.OpSetAttr, wire.SetAttrReq{Tok: 1, Path: "d", Valid: wire.SetGroup, Group: "staff@fuzz"}, nil); err != nil {
		t.Errorf("chgrp by the owner: %v", err)
	}
	if g := getattr("d"); g.Group != "staff@fuzz" || g.Owner != "admin@fuzz" {
		t.Errorf("after chgrp: %q:%q", g.Owner, g.Group)
	}
	// With the administer right: anything.
	if err := serveAs(t, s, sc, wire.OpMkdir, wire.MkdirReq{Tok: 1, Path: "adm/s", Mode: 0o2775, Owner: "bob@fuzz"}, &a); err != nil {
		t.Fatal(err)
	}
	if a.Attr.Owner != "bob@fuzz" || a.Attr.Mode != syscall.S_IFDIR|0o2775 {
		t.Errorf("mkdir 2775 for bob with the administer right: %q %o", a.Attr.Owner, a.Attr.Mode)
	}
	if err := syscall.Stat(filepath.Join(root, "adm/s"), &st); err != nil || st.Mode&syscall.S_ISGID != 0 {
		t.Errorf("the share's directory has mode %o (%v): a setgid bit from a client", st.Mode, err)
	}
	if err := serveAs(t, s, sc, wire.OpSetAttr, wire.SetAttrReq{Tok: 1, Path: "adm/s", Valid: wire.SetOwner | wire.SetGroup | wire.SetMode, Owner: "#0", Group: "#0", Mode: 0o6755}, &a); err != nil {
		t.Fatalf("chown with the administer right: %v", err)
	}
	if a.Attr.Owner != "#0" || a.Attr.Group != "#0" || a.Attr.Mode != syscall.S_IFDIR|0o6755 {
		t.Errorf("after chown #0:#0 and chmod 6755: %q:%q %o", a.Attr.Owner, a.Attr.Group, a.Attr.Mode)
	}
	if err := syscall.Stat(filepath.Join(root, "adm/s"), &st); err != nil || st.Uid == 0 && os.Geteuid() == 0 || st.Mode&0o7777 != 0o755 {
		t.Errorf("chown #0 made the share's directory root's (%v)", err)
	}
	// No client reads or writes the record itself.
	for _, name := range []string{wire.XattrShareOwner, "trusted.pando.owner"} {
		before := getattr("d/f")
		err := serveAs(t, s, sc, wire.OpSetXattr, wire.SetXattrReq{Tok: 1, Path: "d/f", Name: name, Value: []byte("1 - admin@fuzz -")}, nil)
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeNotSupp {
			t.Errorf("setxattr %s: %v, want EOPNOTSUPP", name, err)
		}
		if err := serveAs(t, s, sc, wire.OpGetXattr, wire.XattrReq{Tok: 1, Path: "d/f", Name: name}, nil); !errors.As(err, &we) || we.Code != wire.CodeNotSupp {
			t.Errorf("getxattr %s: %v, want EOPNOTSUPP", name, err)
		}
		if after := getattr("d/f"); after != before {
			t.Errorf("a refused setxattr %s changed %+v to %+v", name, before, after)
		}
	}
	// Hostile names are refused.
	for _, bad := range []string{"a b", "#x", "#-1", "#4294967295", string(make([]byte, 300))} {
		err := serveAs(t, s, sc, wire.OpSetAttr, wire.SetAttrReq{Tok: 1, Path: "adm/s", Valid: wire.SetOwner, Owner: bad}, nil)
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeInvalid {
			t.Errorf("chown to %q: %v, want EINVAL", bad, err)
		}
	}
}

func TestIdentRecord(t *testing.T) {
	for _, id := range []ident{{}, {owner: "a@b"}, {group: "#3", setid: syscall.S_ISGID}, {setid: syscall.S_ISUID | syscall.S_ISGID}, {owner: "x", setid: syscall.S_ISUID}, {owner: "#0", group: "g@d"}} {
		got, ok := decodeIdent(id.encode())
		if !ok || got != id {
			t.Errorf("%+v: decoded as %+v, %v", id, got, ok)
		}
	}
	for _, bad := range []string{"", "1 - a", "2 - a b", "1 x a b", "1 gu a b", "1 - #x b", "1 - a b c"} {
		if _, ok := decodeIdent([]byte(bad)); ok {
			t.Errorf("%q decodes", bad)
		}
	}
}
