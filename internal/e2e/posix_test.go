package e2e

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSpecialFiles: through the mount, mkfifo and bind make a FIFO and a
// socket that are real entries at the share and work on this host; a
// device cannot be made (EPERM, nothing at the share); a file created with
// mode 0 keeps mode 0 (go-fuse showed 0644).
func TestSpecialFiles(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	for _, mode := range [][]string{nil, {"--consistency", "callback", "--write", "back"}} {
		a := mountAgent(t, d.admin, mode...)
		dir := filepath.Join(a.dir, "uva/alpha")
		sub := "special" + map[bool]string{true: "-default", false: "-back"}[mode == nil]
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		dir, share := filepath.Join(dir, sub), filepath.Join(root, sub)

		if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o640); err != nil {
			t.Fatalf("mkfifo: %v", err)
		}
		checkMode(t, filepath.Join(dir, "fifo"), filepath.Join(share, "fifo"), syscall.S_IFIFO|0o640)
		r, err := os.OpenFile(filepath.Join(dir, "fifo"), os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			t.Fatalf("opening the FIFO to read: %v", err)
		}
		w, err := os.OpenFile(filepath.Join(dir, "fifo"), os.O_WRONLY, 0)
		if err != nil {
			t.Fatalf("opening the FIFO to write: %v", err)
		}
		w.Write([]byte("through"))
		w.Close()
		buf := make([]byte, 16)
		n, _ := r.Read(buf)
		r.Close()
		if string(buf[:n]) != "through" {
			t.Errorf("the FIFO passed %q", buf[:n])
		}

		sock := filepath.Join(dir, "sock")
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatalf("bind: %v", err)
		}
		if st, err := os.Lstat(filepath.Join(share, "sock")); err != nil || st.Mode()&os.ModeSocket == 0 {
			t.Errorf("the share has no socket: %v", err)
		}
		go func() {
			if c, err := l.Accept(); err == nil {
				c.Write([]byte("hello"))
				c.Close()
			}
		}()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatalf("connecting to the socket: %v", err)
		}
		n, _ = c.Read(buf)
		c.Close()
		l.Close()
		if string(buf[:n]) != "hello" {
			t.Errorf("the socket passed %q", buf[:n])
		}

		if err := unix.Mknod(filepath.Join(dir, "null"), syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); !errors.Is(err, syscall.EPERM) {
			t.Errorf("mknod of a character device: %v, want EPERM", err)
		}
		if _, err := os.Lstat(filepath.Join(share, "null")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused mknod left %v at the share", err)
		}

		fd, err := unix.Open(filepath.Join(dir, "zero"), unix.O_CREAT|unix.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		checkMode(t, filepath.Join(dir, "zero"), filepath.Join(share, "zero"), syscall.S_IFREG)
	}
}

// checkMode checks a file's mode through the mount and at the share.
func checkMode(t *testing.T, mounted, atShare string, want uint32) {
	t.Helper()
	for _, p := range []string{mounted, atShare} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Errorf("%v", err)
		} else if st.Mode != want {
			t.Errorf("%s has mode %o, want %o", p, st.Mode, want)
		}
	}
}
