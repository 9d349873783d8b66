package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestXattrCopy: cp -a carries a file's user attributes into the mount and
// back out; the attributes of other namespaces, which the kernel and ls ask
// for all the time, cost no round trip to the share.
func TestXattrCopy(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	local := t.TempDir()
	src := filepath.Join(local, "run42.txt")
	if err := os.WriteFile(src, []byte("run 42: ok\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"user.origin": "lab-7", "user.checksum": "crc32c:5ac0f0e1"}
	for n, v := range want {
		if err := unix.Setxattr(src, n, []byte(v), 0); err != nil {
			t.Fatalf("the test directory takes no user attributes: %v", err)
		}
	}
	has := func(t *testing.T, where, p string) {
		t.Helper()
		for n, v := range want {
			buf := make([]byte, 256)
			k, err := unix.Getxattr(p, n, buf)
			if err != nil || string(buf[:k]) != v {
				t.Errorf("%s: %s is %q, %v; want %q", where, n, buf[:max(k, 0)], err, v)
			}
		}
	}
	cp := func(t *testing.T, args ...string) {
		t.Helper()
		if out, err := exec.Command("cp", args...).CombinedOutput(); err != nil || len(out) > 0 {
			t.Fatalf("cp %v: %v %s", args, err, out)
		}
	}
	for _, mode := range [][]string{{"--write", "close"}, {"--write", "back", "--consistency", "callback"}} {
		t.Run(mode[1], func(t *testing.T) {
			a := mountAgent(t, d.admin, mode...)
			dir := filepath.Join(a.dir, "uva", "alpha", mode[1])
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			a.settle(t, dir)
			cp(t, "-a", src, dir+"/")
			has(t, "at the share", filepath.Join(root, mode[1], "run42.txt"))
			has(t, "through the mount", filepath.Join(dir, "run42.txt"))
			back := t.TempDir()
			cp(t, "--preserve=xattr", filepath.Join(dir, "run42.txt"), back+"/")
			has(t, "copied back out", filepath.Join(back, "run42.txt"))

			gets := rpcCount(t, a, "getxattr")
			if out, err := exec.Command("ls", "-l", dir).CombinedOutput(); err != nil {
				t.Fatalf("ls -l: %v %s", err, out)
			}
			if err := os.WriteFile(filepath.Join(dir, "run42.txt"), []byte("run 42: rerun\n"), 0o640); err != nil {
				t.Fatal(err)
			}
			if n := rpcCount(t, a, "getxattr"); n != gets {
				t.Errorf("ls -l and a write sent %v getxattr requests to the share; security.* and system.* are answered by the agent", n-gets)
			}
			// A rename sends what a write delegation kept back: the
			// attributes' change of version makes no conflict of it.
			final := filepath.Join(dir, "run42-final.txt")
			if err := os.Rename(filepath.Join(dir, "run42.txt"), final); err != nil {
				t.Fatal(err)
			}
			at := filepath.Join(root, mode[1], "run42-final.txt")
			if b, err := os.ReadFile(at); err != nil || string(b) != "run 42: rerun\n" {
				t.Errorf("at the share after the rename: %q %v", b, err)
			}
			has(t, "after a write", at)
			if ents, _ := os.ReadDir(filepath.Join(root, mode[1])); len(ents) != 1 {
				t.Errorf("the share holds %v, want the one file", ents)
			}
		})
	}
}
