package share

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/wire"
)

// TestMknod: a FIFO, a socket and an empty regular file asked for with
// mknod are made as such at the share, with the permission bits asked
// (never setuid or setgid) and not owned by root; a device or an unknown
// type is refused with nothing made; opening a FIFO at the share is
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
		want := c.mode &^ (syscall.S_ISUID | syscall.S_ISGID)
		if st.Mode != want || a.Attr.Mode != want {
			t.Errorf("mknod %s %o: the share has %o and answers %o", c.name, c.mode, st.Mode, a.Attr.Mode)
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
		{"chr", syscall.S_IFCHR | 0o600, wire.CodePerm},
		{"blk", syscall.S_IFBLK | 0o600, wire.CodePerm},
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
