package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOwnership: through a mount lent to local uids, files have owners
// and groups: what a local user makes is theirs, root's chown sticks
// (kept at the share as a record, never as the share's real owner), and
// the kernel applies POSIX's rules to every caller over them. Uid 65534
// may not truncate, chmod, chown, rename or unlink in a sticky directory
// what is not its own, and nothing changes at the share when it tries; it
// may do all that to its own file. A setgid directory gives its group to
// what is made in it.
func TestOwnership(t *testing.T) {
	needRoot(t)
	bin := workerBin(t)
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	a := mountAgent(t, d.admin, "--lend-to", "65534,65533")
	openToOthers(t, a.dir)
	dir := filepath.Join(a.dir, "uva", "alpha")
	nobody := localUser{name: "nobody", uid: 65534, gid: 65534}
	other := localUser{name: "uid 65533", uid: 65533, gid: 65533}
	owner := func(p string) (uint32, uint32, uint32) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid, st.Gid, st.Mode
	}

	// Root's files, and a file of 65533's, in a sticky directory.
	st := filepath.Join(dir, "tmp")
	if err := os.Mkdir(st, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(st, 0o1777); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"roots", "others"} {
		if err := os.WriteFile(filepath.Join(st, n), []byte("the content of "+n+"\n"), 0o666); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(st, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(st, "rootdir"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(st, "others"), 65533, 65533); err != nil {
		t.Fatalf("root's chown: %v", err)
	}
	if u, g, _ := owner(filepath.Join(st, "others")); u != 65533 || g != 65533 {
		t.Errorf("after chown 65533:65533 the file shows %d:%d", u, g)
	}
	if u, g, m := owner(st); u != 0 || g != 0 || m&0o7777 != 0o1777 {
		t.Errorf("root's sticky directory shows %d:%d %o", u, g, m)
	}
	var real unix.Stat_t
	if err := unix.Lstat(filepath.Join(root, "tmp/others"), &real); err != nil {
		t.Fatal(err)
	}
	if real.Uid == 65533 || real.Uid == 0 {
		t.Errorf("the share's file has the uid %d: a client's chown reached its real owner", real.Uid)
	}

	before := shareTree(t, root)
	for _, f := range []string{"roots", "others"} {
		p := filepath.Join(st, f)
		nobody.expect(t, bin, "EACCES", userOp{Op: "truncate", Path: p}, userOp{Op: "write", Path: p})
		nobody.expect(t, bin, "EPERM", userOp{Op: "chmod", Path: p}, userOp{Op: "chown", Path: p, Path2: "65534:65534"},
			userOp{Op: "chown", Path: p, Path2: "-1:65534"}, userOp{Op: "utimes", Path: p},
			userOp{Op: "rename", Path: p, Path2: filepath.Join(st, "mine")}, userOp{Op: "remove", Path: p})
	}
	nobody.expect(t, bin, "EPERM", userOp{Op: "rmdir", Path: filepath.Join(st, "rootdir")},
		userOp{Op: "rename", Path: filepath.Join(st, "rootdir"), Path2: filepath.Join(st, "x")})
	other.expect(t, bin, "EPERM", userOp{Op: "chown", Path: filepath.Join(st, "others"), Path2: "65534:65533"})
	sameTree(t, "after uid 65534's attempts in a sticky directory", before, shareTree(t, root))
	for _, f := range []string{"roots", "others"} {
		if b, err := os.ReadFile(filepath.Join(st, f)); err != nil || string(b) != "the content of "+f+"\n" {
			t.Errorf("%s after the attempts: %q, %v", f, b, err)
		}
	}

	// Its own file: everything, and it shows as its own.
	mine := filepath.Join(st, "mine")
	nobody.expect(t, bin, "", userOp{Op: "create", Path: mine})
	if u, g, _ := owner(mine); u != 65534 || g != 65534 {
		t.Errorf("a file uid 65534 made shows %d:%d", u, g)
	}
	nobody.expect(t, bin, "", userOp{Op: "write", Path: mine}, userOp{Op: "truncate", Path: mine},
		userOp{Op: "chown", Path: mine, Path2: "-1:65534"}, userOp{Op: "chmod", Path: mine},
		userOp{Op: "rename", Path: mine, Path2: mine + "2"}, userOp{Op: "remove", Path: mine + "2"})
	// 65533 may not unlink 65534's file there either.
	nobody.expect(t, bin, "", userOp{Op: "create", Path: mine})
	other.expect(t, bin, "EPERM", userOp{Op: "remove", Path: mine})
	if _, err := os.Lstat(mine); err != nil {
		t.Errorf("65534's file after 65533 tried to remove it: %v", err)
	}

	// A setgid directory gives its group to what is made in it.
	sg := filepath.Join(dir, "sg")
	if err := os.Mkdir(sg, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(sg, 65534, 65533); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(sg, 0o2777); err != nil {
		t.Fatal(err)
	}
	if _, _, m := owner(sg); m&syscall.S_ISGID == 0 {
		t.Errorf("a directory chmod 2777 shows %o", m&0o7777)
	}
	if err := os.WriteFile(filepath.Join(sg, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(sg, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if u, g, _ := owner(filepath.Join(sg, "f")); u != 0 || g != 65533 {
		t.Errorf("root's file in a setgid directory of group 65533 shows %d:%d", u, g)
	}
	if _, g, m := owner(filepath.Join(sg, "d")); g != 65533 || m&syscall.S_ISGID == 0 {
		t.Errorf("a directory made in a setgid directory shows group %d mode %o", g, m&0o7777)
	}
	if err := unix.Lstat(filepath.Join(root, "sg"), &real); err != nil || real.Mode&syscall.S_ISGID != 0 {
		t.Errorf("the share's directory has mode %o (%v): a setgid bit from a client", real.Mode, err)
	}
}

// TestLentSizeWhileWriting: on a lent mount every access is a lookup (the
// kernel keeps no entries); a lookup of a file a program is writing
// (close mode: nothing sent yet) answers its local size, not the share's,
// so that a stat shows what was written and a read after an unlink of the
// open file reads it (pjdfstest unlink/14.t).
func TestLentSizeWhileWriting(t *testing.T) {
	needRoot(t)
	d := newDomain(t, "uva")
	d.addShare("alpha")
	a := mountAgent(t, d.admin, "--lend-to", "65534")
	p := filepath.Join(a.dir, "uva/alpha", "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(p, unix.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	msg := []byte("Hello, World!")
	if _, err := unix.Pwrite(fd, msg, 0); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil || st.Size != int64(len(msg)) {
		t.Errorf("stat of the file being written: size %d (%v), want %d", st.Size, err, len(msg))
	}
	if err := unix.Unlink(p); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := unix.Pread(fd, buf, 0)
	if err != nil || string(buf[:n]) != string(msg) {
		t.Errorf("read of the open file after its unlink: %q, %v", buf[:n], err)
	}
}

// TestSetIDClearedOnWrite: a write by another local user clears a file's
// setuid and setgid bits, as Linux does, and the mount shows it at once,
// under write-back too, where the data is kept back after the close
// (pjdfstest chmod/12.t).
func TestSetIDClearedOnWrite(t *testing.T) {
	needRoot(t)
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	for _, mode := range [][]string{nil, {"--consistency", "callback", "--write", "back"}} {
		a := mountAgent(t, d.admin, append(mode, "--lend-to", "65534")...)
		openToOthers(t, a.dir)
		name := "f" + strconv.Itoa(len(mode))
		p := filepath.Join(a.dir, "uva/alpha", name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(p, 0o6777); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("/bin/sh", "-c", `printf x > "$1"`, "sh", p)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: uid 65534 writes: %v: %s", mode, err, out)
		}
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil || st.Mode&0o7777 != 0o777 || st.Size != 1 {
			t.Errorf("%v: after a write by another user the file shows mode %o size %d (%v), want 777 and 1", mode, st.Mode&0o7777, st.Size, err)
		}
		a.unmount(t) // the kept back data reaches the share
		if err := unix.Lstat(filepath.Join(root, name), &st); err != nil || st.Mode&0o7777 != 0o777 {
			t.Errorf("%v: the share's file has mode %o (%v), want 777", mode, st.Mode&0o7777, err)
		}
	}
}

// TestOwnershipAcrossPrincipals: a file alice makes through her mount is
// hers: her agent shows it as its own uid, another agent as the local
// user it maps alice to (--map-user), or as nobody (--nobody) when it maps
// her to no one. Alice, without the administer right, may not give her
// file away (EPERM, nothing changed) but may change its group; the
// administrator may give it to anyone.
func TestOwnershipAcrossPrincipals(t *testing.T) {
	needRoot(t)
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	alice := d.addUser("alice")
	d.pando(d.admin, "acl", "set", "/uva/alpha", "alice", "rlidwk").ok()
	am := mountAgent(t, alice)
	// Strict: each stat asks the share, which the other mounts change.
	mapped := mountAgent(t, d.admin, "--consistency", "strict", "--map-user", "alice@uva=65533", "--nobody", "65000:65001")
	unmapped := mountAgent(t, d.admin, "--consistency", "strict")
	owner := func(dir, name string) (uint32, uint32) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, "uva/alpha", name), &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid, st.Gid
	}
	if err := os.WriteFile(filepath.Join(am.dir, "uva/alpha", "hers"), []byte("alice's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if u, _ := owner(am.dir, "hers"); u != 0 {
		t.Errorf("alice's file through her own agent shows uid %d, want its own 0", u)
	}
	if u, _ := owner(mapped.dir, "hers"); u != 65533 {
		t.Errorf("alice's file through an agent mapping alice@uva=65533 shows uid %d", u)
	}
	// Its group is #0, root's gid on alice's host.
	if u, g := owner(unmapped.dir, "hers"); u != 65534 || g != 0 {
		t.Errorf("alice's file through an agent that maps her to no one shows %d:%d, want nobody's uid and 0", u, g)
	}
	if u, _ := owner(mapped.dir, "hers"); u != 65533 {
		t.Errorf("alice's file through an agent that maps her to 65533 shows uid %d", u)
	}
	before := shareTree(t, root)
	if err := os.Chown(filepath.Join(am.dir, "uva/alpha", "hers"), 65533, -1); !errors.Is(err, syscall.EPERM) {
		t.Errorf("alice gives her file away without the administer right: %v, want EPERM", err)
	}
	sameTree(t, "after alice's refused chown", before, shareTree(t, root))
	if u, _ := owner(unmapped.dir, "hers"); u != 65534 {
		t.Errorf("after alice's refused chown her file shows uid %d elsewhere", u)
	}
	if err := os.Chown(filepath.Join(am.dir, "uva/alpha", "hers"), -1, 100); err != nil {
		t.Errorf("alice changes the group of her own file: %v", err)
	}
	if _, g := owner(unmapped.dir, "hers"); g != 100 {
		t.Errorf("after alice's chgrp to 100 the file shows gid %d elsewhere", g)
	}
	if err := os.Chown(filepath.Join(unmapped.dir, "uva/alpha", "hers"), 4242, 4343); err != nil {
		t.Errorf("the administrator's chown: %v", err)
	}
	if u, g := owner(mapped.dir, "hers"); u != 4242 || g != 4343 {
		t.Errorf("after the administrator's chown 4242:4343 the file shows %d:%d", u, g)
	}
}
