package share

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/wire"
)

// TestMknod: a FIFO, a socket and an empty regular file asked for with
// mknod are made as such at the share, with the permission bits asked
// (never setuid or setgid: those are shown from a record) and not owned
// by root; an unknown type is
// refused with nothing made; opening a FIFO at the share is
// refused at once instead of waiting for a writer.
func TestMknod(t *testing.T) {
	root := t.TempDir()
	s, sc := serverWith(t, root, []auth.Grant{{Path: "", Rights: auth.All}})
	for _, c := range []struct {
		name string
		mode uint32
	}{
		{"fifo", syscall.S_IFIFO | 0o640},
		{"sock", syscall.S_IFSOCK | 0o600},
		{"reg", syscall.S_IFREG | 0o604},
		{"setid", syscall.S_IFIFO | 0o6755},
	} {
		var a wire.AttrResp
		if err := serveAs(t, s, sc, wire.OpMknod, wire.MknodReq{Tok: 1, Path: c.name, Mode: c.mode}, &a); err != nil {
			t.Fatalf("mknod %s: %v", c.name, err)
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(root, c.name), &st); err != nil {
			t.Fatal(err)
		}
		want, shown := c.mode&^(syscall.S_ISUID|syscall.S_ISGID), c.mode
		if os.Geteuid() != 0 {
			shown = want // only a share running as root keeps a FIFO's bits as a record
		}
		if st.Mode != want || a.Attr.Mode != shown {
			t.Errorf("mknod %s %o: the share has %o and answers %o, want %o and %o", c.name, c.mode, st.Mode, a.Attr.Mode, want, shown)
		}
		if os.Geteuid() == 0 && st.Uid == 0 {
			t.Errorf("%s, made by a client of a share running as root, belongs to root", c.name)
		}
	}
	for _, c := range []struct {
		name string
		mode uint32
		code wire.Code
	}{
		{"dir", syscall.S_IFDIR | 0o755, wire.CodeInvalid},
		{"none", 0o644, wire.CodeInvalid},
	} {
		err := serveAs(t, s, sc, wire.OpMknod, wire.MknodReq{Tok: 1, Path: c.name, Mode: c.mode}, nil)
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != c.code {
			t.Errorf("mknod %s %o: %v, want code %d", c.name, c.mode, err, c.code)
		}
		if _, err := os.Lstat(filepath.Join(root, c.name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused mknod made %s: %v", c.name, err)
		}
	}
	done := make(chan error, 1)
	go func() {
		done <- serveAs(t, s, sc, wire.OpOpen, wire.OpenReq{Tok: 1, Path: "fifo", Flags: wire.OpenRead}, nil)
	}()
	select {
	case err := <-done:
		var we *wire.Error
		if !errors.As(err, &we) || we.Errno() != syscall.ENXIO {
			t.Errorf("opening a FIFO at the share: %v, want ENXIO", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("opening a FIFO at the share waits for a writer")
	}
}

// TestDeviceRecord: a character or block device asked for with mknod is
// an empty regular file at the share, of mode 01600 (never a device node
// on the share's host), shown with the type, bits and number asked by
// getattr, a listing and an open; a chmod keeps it a device.
func TestDeviceRecord(t *testing.T) {
	root := t.TempDir()
	s, sc := serverWith(t, root, []auth.Grant{{Path: "", Rights: auth.All}})
	for _, c := range []struct {
		name string
		mode uint32
		rdev uint32
	}{
		{"chr", syscall.S_IFCHR | 0o644, 0x0103},
		{"blk", syscall.S_IFBLK | 0o4640, 0x0801},
	} {
		var a wire.AttrResp
		if err := serveAs(t, s, sc, wire.OpMknod, wire.MknodReq{Tok: 1, Path: c.name, Mode: c.mode, Rdev: c.rdev}, &a); err != nil {
			t.Fatalf("mknod %s: %v", c.name, err)
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(root, c.name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode != syscall.S_IFREG|syscall.S_ISVTX|0o600 || st.Size != 0 || st.Rdev != 0 {
			t.Errorf("%s at the share: mode %o, size %d, rdev %x; want an empty file of mode 01600", c.name, st.Mode, st.Size, st.Rdev)
		}
		want := func(how string, got wire.Attr, mode uint32) {
			t.Helper()
			if got.Mode != mode || got.Rdev != uint64(c.rdev) {
				t.Errorf("%s %s: mode %o rdev %x, want %o %x", how, c.name, got.Mode, got.Rdev, mode, c.rdev)
			}
		}
		want("mknod", a.Attr, c.mode)
		if err := serveAs(t, s, sc, wire.OpGetAttr, wire.PathReq{Tok: 1, Path: c.name}, &a); err != nil {
			t.Fatal(err)
		}
		want("getattr", a.Attr, c.mode)
		if err := serveAs(t, s, sc, wire.OpSetAttr, wire.SetAttrReq{Tok: 1, Path: c.name, Valid: wire.SetMode, Mode: 0o600}, &a); err != nil {
			t.Fatal(err)
		}
		want("chmod 0600", a.Attr, c.mode&syscall.S_IFMT|0o600)
		syscall.Lstat(filepath.Join(root, c.name), &st)
		if st.Mode != syscall.S_IFREG|syscall.S_ISVTX|0o600 {
			t.Errorf("%s at the share after chmod: mode %o", c.name, st.Mode)
		}
	}
	var l wire.ReadDirResp
	if err := serveAs(t, s, sc, wire.OpReadDir, wire.ReadDirReq{Tok: 1, Path: ""}, &l); err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Entries {
		if e.Attr.Mode&syscall.S_IFMT == syscall.S_IFREG {
			t.Errorf("the listing shows %s as a regular file (%o)", e.Name, e.Attr.Mode)
		}
	}
}

// TestSetIDRecord: setuid and setgid bits a client gives a regular file
// (at create and by chmod) are shown in its attributes, while the file at
// the share never has them; a chmod without them removes the record; no
// client reads, lists, sets or removes the attribute that holds it, and a
// refused attempt changes nothing.
func TestSetIDRecord(t *testing.T) {
	root := t.TempDir()
	s, sc := serverWith(t, root, []auth.Grant{{Path: "", Rights: auth.All}})
	var h wire.OpenResp
	if err := serveAs(t, s, sc, wire.OpCreate, wire.OpenReq{Tok: 1, Path: "f", Flags: wire.OpenWrite, Mode: 0o6755}, &h); err != nil {
		t.Fatal(err)
	}
	serveAs(t, s, sc, wire.OpClose, wire.HandleReq{Handle: h.Handle}, nil)
	check := func(how string, got wire.Attr, shown, real uint32) {
		t.Helper()
		if got.Mode != syscall.S_IFREG|shown {
			t.Errorf("%s: shown %o, want %o", how, got.Mode&0o7777, shown)
		}
		var st syscall.Stat_t
		syscall.Lstat(filepath.Join(root, "f"), &st)
		if st.Mode&0o7777 != real {
			t.Errorf("%s: the share's file has %o, want %o", how, st.Mode&0o7777, real)
		}
	}
	check("create 06755", h.Attr, 0o6755, 0o1755)
	var a wire.AttrResp
	serveAs(t, s, sc, wire.OpGetAttr, wire.PathReq{Tok: 1, Path: "f"}, &a)
	check("getattr", a.Attr, 0o6755, 0o1755)
	for _, c := range []struct {
		op  wire.Op
		msg any
	}{
		{wire.OpGetXattr, wire.XattrReq{Tok: 1, Path: "f", Name: wire.XattrShareMeta}},
		{wire.OpRemoveXattr, wire.XattrReq{Tok: 1, Path: "f", Name: wire.XattrShareMeta}},
		{wire.OpSetXattr, wire.SetXattrReq{Tok: 1, Path: "f", Name: wire.XattrShareMeta, Value: []byte("1 20644 0")}},
	} {
		if err := serveAs(t, s, sc, c.op, c.msg, nil); err == nil {
			t.Errorf("%s of %s was not refused", c.op, wire.XattrShareMeta)
		}
	}
	var names wire.ListXattrResp
	serveAs(t, s, sc, wire.OpListXattr, wire.PathReq{Tok: 1, Path: "f"}, &names)
	if len(names.Names) != 0 {
		t.Errorf("listxattr shows %v", names.Names)
	}
	serveAs(t, s, sc, wire.OpGetAttr, wire.PathReq{Tok: 1, Path: "f"}, &a)
	check("after the refused attempts", a.Attr, 0o6755, 0o1755)
	prior := a.Attr.Version
	serveAs(t, s, sc, wire.OpSetAttr, wire.SetAttrReq{Tok: 1, Path: "f", Valid: wire.SetMode, Mode: 0o644}, &a)
	check("chmod 0644", a.Attr, 0o644, 0o644)
	if a.Prior != prior {
		// An agent keeps what it cached of the file across its own chmod.
		t.Errorf("chmod answers prior version %d (version %d), want %d", a.Prior, a.Attr.Version, prior)
	}
	serveAs(t, s, sc, wire.OpSetAttr, wire.SetAttrReq{Tok: 1, Path: "f", Valid: wire.SetMode, Mode: 0o4711}, &a)
	check("chmod 04711", a.Attr, 0o4711, 0o1711)
	serveAs(t, s, sc, wire.OpSetAttr, wire.SetAttrReq{Tok: 1, Path: "f", Valid: wire.SetMode, Mode: 0o1644}, &a)
	check("chmod 01644", a.Attr, 0o1644, 0o1644)
}

// TestNameTooLong: a name over 255 bytes or a path over 16 KiB is refused
// with ENAMETOOLONG, as a file system refuses it, and nothing is made.
func TestNameTooLong(t *testing.T) {
	root := t.TempDir()
	s, sc := serverWith(t, root, []auth.Grant{{Path: "", Rights: auth.All}})
	long := strings.Repeat("n", 256)
	deep := strings.Repeat(strings.Repeat("d", 200)+"/", 90) + "f" // over auth.MaxPath
	for _, p := range []string{long, "a/" + long, deep} {
		for _, c := range []struct {
			op  wire.Op
			msg any
		}{
			{wire.OpCreate, wire.OpenReq{Tok: 1, Path: p, Flags: wire.OpenWrite, Mode: 0o644}},
			{wire.OpMkdir, wire.MkdirReq{Tok: 1, Path: p, Mode: 0o755}},
			{wire.OpGetAttr, wire.PathReq{Tok: 1, Path: p}},
			{wire.OpUnlink, wire.PathReq{Tok: 1, Path: p}},
		} {
			err := serveAs(t, s, sc, c.op, c.msg, nil)
			var we *wire.Error
			if !errors.As(err, &we) || we.Errno() != syscall.ENAMETOOLONG {
				t.Errorf("%s of a path of %d bytes: %v, want ENAMETOOLONG", c.op, len(p), err)
			}
		}
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Errorf("refused requests made %d entries", len(ents))
	}
}

// TestLongPath: a path longer than the kernel takes in one call (4096
// bytes), made of names of at most 255, is served: a program names it
// relative to a directory deep in the share.
func TestLongPath(t *testing.T) {
	root := t.TempDir()
	s, sc := serverWith(t, root, []auth.Grant{{Path: "", Rights: auth.All}})
	dir := ""
	for i := 0; len(dir) < 6000; i++ {
		dir = joinRel(dir, strings.Repeat(string(rune('a'+i%26)), 250))
		if err := serveAs(t, s, sc, wire.OpMkdir, wire.MkdirReq{Tok: 1, Path: dir, Mode: 0o755}, nil); err != nil {
			t.Fatalf("mkdir at %d bytes: %v", len(dir), err)
		}
	}
	f := dir + "/f"
	var h wire.OpenResp
	if err := serveAs(t, s, sc, wire.OpCreate, wire.OpenReq{Tok: 1, Path: f, Flags: wire.OpenWrite, Mode: 0o640}, &h); err != nil {
		t.Fatalf("create at %d bytes: %v", len(f), err)
	}
	serveAs(t, s, sc, wire.OpClose, wire.HandleReq{Handle: h.Handle}, nil)
	var a wire.AttrResp
	if err := serveAs(t, s, sc, wire.OpGetAttr, wire.PathReq{Tok: 1, Path: f}, &a); err != nil || a.Attr.Mode != syscall.S_IFREG|0o640 {
		t.Fatalf("getattr at %d bytes: %v, mode %o", len(f), err, a.Attr.Mode)
	}
	if err := serveAs(t, s, sc, wire.OpUnlink, wire.PathReq{Tok: 1, Path: f}, nil); err != nil {
		t.Fatalf("unlink at %d bytes: %v", len(f), err)
	}
}
