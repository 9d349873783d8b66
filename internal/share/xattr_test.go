package share

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/wire"
)

// xattrRoot is a new directory on a file system that holds user extended
// attributes of the largest size (tmpfs does; ext4 only about a block's
// worth).
func xattrRoot(t *testing.T) string {
	t.Helper()
	for _, base := range []string{"", "/dev/shm"} {
		dir, err := os.MkdirTemp(base, "pando-xattr-")
		if err != nil {
			continue
		}
		probe := filepath.Join(dir, "probe")
		err = os.WriteFile(probe, nil, 0o644)
		if err == nil {
			err = unix.Setxattr(probe, "user.probe", make([]byte, wire.XattrValueMax), 0)
		}
		if err == nil && os.Remove(probe) == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
		os.RemoveAll(dir)
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no file system here holds user extended attributes of 64 KiB (neither $TMPDIR nor /dev/shm)")
	}
	t.Skip("no file system here holds user extended attributes of 64 KiB (neither $TMPDIR nor /dev/shm)")
	return ""
}

// TestXattr: user attributes travel with the rights they need, with
// setxattr(2)'s flags and errors, up to 64 KiB; other namespaces do not;
// no path leaves the root, and a final symlink is not followed.
func TestXattr(t *testing.T) {
	root := xattrRoot(t)
	os.MkdirAll(filepath.Join(root, "d"), 0o755)
	for _, n := range []string{"d/f", "d/ro", "d/blind"} {
		os.WriteFile(filepath.Join(root, n), []byte("data"), 0o644)
	}
	outside := filepath.Join(t.TempDir(), "outside")
	os.WriteFile(outside, []byte("not shared"), 0o644)
	os.Symlink(outside, filepath.Join(root, "d/link"))
	os.Symlink(filepath.Dir(outside), filepath.Join(root, "out"))
	s, sc := serverWith(t, root, []auth.Grant{
		{Path: "", Rights: auth.All},
		{Path: "d/ro", Rights: auth.List | auth.Read},
		{Path: "d/blind", Rights: auth.List},
	})
	get := func(p, name string) ([]byte, error) {
		t.Helper()
		var r wire.XattrResp
		err := serveAs(t, s, sc, wire.OpGetXattr, wire.XattrReq{Tok: 1, Path: p, Name: name}, &r)
		return r.Value, err
	}
	set := func(p, name string, val []byte, flags uint32) error {
		t.Helper()
		return serveAs(t, s, sc, wire.OpSetXattr, wire.SetXattrReq{Tok: 1, Path: p, Name: name, Value: val, Flags: flags}, nil)
	}
	list := func(p string) ([]string, error) {
		t.Helper()
		var r wire.ListXattrResp
		err := serveAs(t, s, sc, wire.OpListXattr, wire.PathReq{Tok: 1, Path: p}, &r)
		return r.Names, err
	}
	remove := func(p, name string) error {
		t.Helper()
		return serveAs(t, s, sc, wire.OpRemoveXattr, wire.XattrReq{Tok: 1, Path: p, Name: name}, nil)
	}
	wantCode := func(what string, err error, code wire.Code) {
		t.Helper()
		if wire.CodeOf(err) != code {
			t.Errorf("%s: got %v (code %d), want code %d", what, err, wire.CodeOf(err), code)
		}
	}

	if _, err := get("d/f", "user.a"); wire.CodeOf(err) != wire.CodeNoData || !errors.Is(err, syscall.ENODATA) {
		t.Errorf("get of a missing attribute: %v", err)
	}
	_, since, _, _ := s.inv.poll("watcher", 0, 0, false, 0)
	before, _ := s.lstat("d/f")
	var after wire.AttrResp
	if err := serveAs(t, s, sc, wire.OpSetXattr, wire.SetXattrReq{Tok: 1, Path: "d/f", Name: "user.a", Value: []byte("1"), Flags: wire.XattrCreate}, &after); err != nil {
		t.Fatal(err)
	}
	if a := after.Attr; a.Ino != before.Ino || a.Ctime < before.Ctime {
		t.Errorf("set answered attributes %+v; before it: %+v", a, before)
	}
	if paths, _, _, _ := s.inv.poll("watcher", since, 0, false, 0); !slices.Contains(paths, "d/f") {
		t.Errorf("a set was not recorded as a change of the file: %v", paths)
	}
	wantCode("create over an existing attribute", set("d/f", "user.a", []byte("x"), wire.XattrCreate), wire.CodeExist)
	wantCode("replace of a missing attribute", set("d/f", "user.b", []byte("x"), wire.XattrReplace), wire.CodeNoData)
	wantCode("create and replace", set("d/f", "user.b", nil, wire.XattrCreate|wire.XattrReplace), wire.CodeInvalid)
	if err := set("d/f", "user.a", []byte("2"), wire.XattrReplace); err != nil {
		t.Fatal(err)
	}
	if v, err := get("d/f", "user.a"); err != nil || string(v) != "2" {
		t.Errorf("get after replace: %q %v", v, err)
	}

	// The largest value Linux allows, and one byte more.
	big := bytes.Repeat([]byte("0123456789abcdef"), wire.XattrValueMax/16)
	if err := set("d/f", "user.big", big, 0); err != nil {
		t.Fatal(err)
	}
	if v, err := get("d/f", "user.big"); err != nil || !bytes.Equal(v, big) {
		t.Errorf("get of a 64 KiB value: %d bytes, %v", len(v), err)
	}
	wantCode("a value over 64 KiB", set("d/f", "user.huge", append(big, 'x'), 0), wire.CodeTooBig)

	// Other namespaces neither travel nor show.
	local := unix.Setxattr(filepath.Join(root, "d/f"), "trusted.local", []byte("x"), 0) == nil
	if names, err := list("d/f"); err != nil || !slices.Equal(names, []string{"user.a", "user.big"}) && !slices.Equal(names, []string{"user.big", "user.a"}) {
		t.Errorf("list: %q %v (a trusted.* attribute set at the share: %v)", names, err, local)
	}
	for _, name := range []string{"trusted.local", "security.capability", "system.posix_acl_access"} {
		_, err := get("d/f", name)
		wantCode("get "+name, err, wire.CodeNotSupp)
		wantCode("set "+name, set("d/f", name, []byte("x"), 0), wire.CodeNotSupp)
		wantCode("remove "+name, remove("d/f", name), wire.CodeNotSupp)
	}
	wantCode("the bare prefix as a name", set("d/f", "user.", nil, 0), wire.CodeInvalid)

	if err := remove("d/f", "user.a"); err != nil {
		t.Fatal(err)
	}
	wantCode("remove of a missing attribute", remove("d/f", "user.a"), wire.CodeNoData)

	// The share's root and directories carry attributes too.
	for _, p := range []string{"", "d"} {
		if err := set(p, "user.dir", []byte("x"), 0); err != nil {
			t.Errorf("set on %q: %v", p, err)
		}
		if v, err := get(p, "user.dir"); err != nil || string(v) != "x" {
			t.Errorf("get on %q: %q %v", p, v, err)
		}
	}

	// Rights: r to read them, w to change them.
	_, err := get("d/blind", "user.a")
	if we, ok := err.(*wire.Error); !ok || we.Code != wire.CodeAccess || we.Missing != "r" {
		t.Errorf("get without r: %v", err)
	}
	_, err = list("d/blind")
	wantCode("list without r", err, wire.CodeAccess)
	_, err = get("d/ro", "user.a")
	wantCode("get with r", err, wire.CodeNoData)
	for _, err := range []error{set("d/ro", "user.a", []byte("x"), 0), remove("d/ro", "user.a")} {
		if we, ok := err.(*wire.Error); !ok || we.Code != wire.CodeAccess || we.Missing != "w" {
			t.Errorf("change without w: %v", err)
		}
	}

	// No path leaves the root; a final symlink is the link itself, which
	// carries no user attributes, whatever it points to.
	for _, p := range []string{"../x", "d/../../x", "out/outside", "/etc/passwd"} {
		_, err := get(p, "user.a")
		wantCode("get "+p, err, wire.CodeEscape)
		wantCode("set "+p, set(p, "user.a", []byte("x"), 0), wire.CodeEscape)
	}
	wantCode("set through a symlink", set("d/link", "user.a", []byte("x"), 0), wire.CodePerm)
	_, err = get("d/link", "user.a")
	wantCode("get through a symlink", err, wire.CodeNoData)
	if names, err := list("d/link"); err != nil || len(names) != 0 {
		t.Errorf("list of a symlink: %q %v", names, err)
	}
	if _, err := unix.Getxattr(outside, "user.a", nil); !errors.Is(err, syscall.ENODATA) {
		t.Errorf("the file outside the root behind a symlink got an attribute: %v", err)
	}
	_, err = get("d/none", "user.a")
	wantCode("get on a missing file", err, wire.CodeNotExist)
}
