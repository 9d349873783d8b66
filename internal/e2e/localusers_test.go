package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Local users on a mount: the test creates local users, mounts as root,
// and has them try everything a program could do to the mount. The
// attempts run in a copy of the test binary started with the user's uid
// and gid (envLocalUser names them), so that each reports the errno the
// kernel gave it.

const envLocalUser = "PANDO_E2E_LOCALUSER"

// userOp is one attempt of a local user; Path2 is a second path (rename,
// link) or the mode, uid and the like.
type userOp struct {
	Op, Path, Path2 string
}

// userResult is an attempt's outcome: its errno name ("" when it
// worked) and what a read returned.
type userResult struct {
	Errno string
	Data  string
}

// runLocalUserFromEnv runs the attempts named in the environment (in the
// copy of the test binary that runs as the local user) and prints their
// outcomes as JSON.
func runLocalUserFromEnv() bool {
	spec := os.Getenv(envLocalUser)
	if spec == "" {
		return false
	}
	var ops []userOp
	if err := json.Unmarshal([]byte(spec), &ops); err != nil {
		fmt.Fprintln(os.Stderr, "bad attempts:", err)
		os.Exit(2)
	}
	out := make([]userResult, len(ops))
	for i, op := range ops {
		data, err := tryOp(op)
		out[i].Data = data
		if err != nil {
			var en syscall.Errno
			if errors.As(err, &en) {
				out[i].Errno = unix.ErrnoName(en)
			} else {
				out[i].Errno = err.Error()
			}
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(2)
	}
	return true
}

func tryOp(op userOp) (string, error) {
	p := op.Path
	switch op.Op {
	case "read":
		b, err := os.ReadFile(p)
		return string(b), err
	case "read-fd3": // a descriptor an admitted process opened and passed on
		b, err := io.ReadAll(os.NewFile(3, "passed"))
		return string(b), err
	case "reopen-fd3": // a new open of the file that descriptor names
		b, err := os.ReadFile("/proc/self/fd/3")
		return string(b), err
	case "stat":
		_, err := os.Lstat(p)
		return "", err
	case "ls":
		ents, err := os.ReadDir(p)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return strings.Join(names, ","), err
	case "write":
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return "", err
		}
		_, err = f.WriteString("written by a local user\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return "", err
	case "truncate":
		return "", os.Truncate(p, 0)
	case "put": // a new file holding Path2
		return "", os.WriteFile(p, []byte(op.Path2), 0o666)
	case "post-login": // Path2 sent to the login socket at Path
		return postLogin(p, op.Path2)
	case "create":
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			err = f.Close()
		}
		return "", err
	case "tmpfile":
		fd, err := unix.Open(p, unix.O_TMPFILE|unix.O_WRONLY, 0o600)
		if err == nil {
			unix.Close(fd)
		}
		return "", err
	case "mkdir":
		return "", os.Mkdir(p, 0o755)
	case "mknod":
		return "", unix.Mknod(p, unix.S_IFIFO|0o644, 0)
	case "remove":
		return "", unix.Unlink(p)
	case "rmdir":
		return "", unix.Rmdir(p)
	case "rename":
		return "", unix.Rename(p, op.Path2)
	case "link":
		return "", unix.Link(p, op.Path2)
	case "symlink":
		return "", unix.Symlink("target", p)
	case "readlink":
		return os.Readlink(p)
	case "chmod":
		return "", unix.Chmod(p, 0o4755)
	case "chown": // to Path2, "UID:GID"
		u, g, _ := strings.Cut(op.Path2, ":")
		uid, _ := strconv.Atoi(u)
		gid, _ := strconv.Atoi(g)
		return "", unix.Lchown(p, uid, gid)
	case "utimes":
		return "", unix.UtimesNano(p, []unix.Timespec{{Sec: 1}, {Sec: 1}})
	case "setxattr":
		return "", unix.Setxattr(p, "user.x", []byte("1"), 0)
	case "getxattr":
		_, err := unix.Getxattr(p, "user.x", make([]byte, 64))
		return "", err
	case "listxattr":
		_, err := unix.Listxattr(p, make([]byte, 1024))
		return "", err
	case "removexattr":
		return "", unix.Removexattr(p, "user.x")
	case "access":
		return "", unix.Access(p, unix.R_OK)
	case "statfs":
		var st unix.Statfs_t
		return "", unix.Statfs(p, &st)
	case "chdir":
		return "", os.Chdir(p)
	case "flock", "fcntl-lock":
		fd, err := unix.Open(p, unix.O_RDONLY, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		if op.Op == "flock" {
			return "", unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
		}
		return "", unix.FcntlFlock(uintptr(fd), unix.F_SETLK, &unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart})
	}
	return "", fmt.Errorf("unknown attempt %q", op.Op)
}

// localUser is a local account the test created.
type localUser struct {
	name     string
	uid, gid uint32
}

// needRoot skips a test that needs root, except in CI, where it fails.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("this test needs root, and CI runs as root")
	}
	t.Skip("needs root (to create local users and mount for them)")
}

// addLocalUser creates a local user with no home, removed when the test
// ends.
func addLocalUser(t *testing.T) localUser {
	t.Helper()
	name := "pandotest" + rand.Text()[:8]
	name = strings.ToLower(name)
	if out, err := exec.Command("useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
		_ = exec.Command("groupdel", name).Run() // where userdel left the user's group
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return localUser{name: name, uid: uint32(uid), gid: uint32(gid)}
}

// workerBin is a copy of the test binary that any user may run.
func workerBin(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "pando-e2e-worker-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	dst := filepath.Join(dir, "e2e.test")
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, src); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// as runs the attempts as u and returns their outcomes; passed are the
// descriptors 3 and on of the process.
func (u localUser) as(t *testing.T, bin string, ops []userOp, passed ...*os.File) []userResult {
	t.Helper()
	spec, _ := json.Marshal(ops)
	cmd := exec.Command(bin)
	cmd.ExtraFiles = passed
	cmd.Env = []string{envLocalUser + "=" + string(spec), "PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{}}}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("running the attempts as %s: %v: %s", u.name, err, stderr.String())
	}
	var res []userResult
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(ops) {
		t.Fatalf("attempts as %s: %v: %s", u.name, err, out)
	}
	return res
}

// expect runs the attempts as u and checks that each gave errno want
// ("" for success).
func (u localUser) expect(t *testing.T, bin, want string, ops ...userOp) []userResult {
	t.Helper()
	res := u.as(t, bin, ops)
	for i, r := range res {
		if r.Errno != want {
			w := want
			if w == "" {
				w = "success"
			}
			got := r.Errno
			if got == "" {
				got = "success"
			}
			t.Errorf("%s (uid %d): %s %s: %s, want %s", u.name, u.uid, ops[i].Op, ops[i].Path, got, w)
		}
	}
	return res
}

// treeEntry is what the share holds at a path.
type treeEntry struct {
	Mode     fs.FileMode
	Uid, Gid uint32
	Hash     string // of a file's bytes, or a link's target
	Xattrs   string
}

// shareTree records every file's path, mode, owner, content hash and
// user attributes below root.
func shareTree(t *testing.T, root string) map[string]treeEntry {
	t.Helper()
	tree := map[string]treeEntry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		e := treeEntry{Mode: fi.Mode(), Uid: st.Uid, Gid: st.Gid}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			e.Hash = hex.EncodeToString(sum[:])
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Hash, _ = os.Readlink(p)
		}
		buf := make([]byte, 4096)
		if n, err := unix.Llistxattr(p, buf); err == nil {
			names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
			slices.Sort(names)
			for _, name := range names {
				v := make([]byte, 4096)
				k, _ := unix.Lgetxattr(p, name, v)
				e.Xattrs += name + "=" + string(v[:max(k, 0)]) + ";"
			}
		}
		rel, _ := filepath.Rel(root, p)
		tree[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func sameTree(t *testing.T, what string, before, after map[string]treeEntry) {
	t.Helper()
	for p, b := range before {
		if a, ok := after[p]; !ok {
			t.Errorf("%s: %s is gone from the share", what, p)
		} else if a != b {
			t.Errorf("%s: %s changed at the share: %+v, was %+v", what, p, a, b)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s: %s appeared at the share", what, p)
		}
	}
}

// everything is every attempt on the files below dir (as the test lays
// them out) and on the agent's cache.
func everything(dir, cacheDir string) []userOp {
	pub, secret, sub := filepath.Join(dir, "pub.txt"), filepath.Join(dir, "secret.txt"), filepath.Join(dir, "sub")
	return []userOp{
		{Op: "read", Path: pub}, {Op: "read", Path: secret}, {Op: "read", Path: filepath.Join(sub, "inner.txt")},
		{Op: "stat", Path: pub}, {Op: "stat", Path: dir}, {Op: "ls", Path: dir}, {Op: "ls", Path: sub},
		{Op: "chdir", Path: dir}, {Op: "access", Path: pub}, {Op: "statfs", Path: pub},
		{Op: "readlink", Path: filepath.Join(dir, "link")}, {Op: "read", Path: filepath.Join(dir, "link")},
		{Op: "write", Path: pub}, {Op: "truncate", Path: pub}, {Op: "create", Path: filepath.Join(dir, "new.txt")},
		{Op: "tmpfile", Path: dir}, {Op: "mkdir", Path: filepath.Join(dir, "newdir")},
		{Op: "mknod", Path: filepath.Join(dir, "fifo")}, {Op: "symlink", Path: filepath.Join(dir, "newlink")},
		{Op: "link", Path: pub, Path2: filepath.Join(dir, "hard.txt")},
		{Op: "rename", Path: pub, Path2: filepath.Join(dir, "moved.txt")},
		{Op: "remove", Path: pub}, {Op: "rmdir", Path: filepath.Join(sub, "empty")},
		{Op: "chmod", Path: pub}, {Op: "chmod", Path: dir}, {Op: "utimes", Path: pub},
		{Op: "setxattr", Path: pub}, {Op: "getxattr", Path: pub}, {Op: "listxattr", Path: pub}, {Op: "removexattr", Path: pub},
		{Op: "flock", Path: pub}, {Op: "fcntl-lock", Path: pub},
		{Op: "ls", Path: cacheDir}, {Op: "read", Path: filepath.Join(cacheDir, "index.db")},
	}
}

// openToOthers lets other users reach dir (test directories are made
// 0700): the mount point's parents, not the mount.
func openToOthers(t *testing.T, dir string) {
	t.Helper()
	for d := filepath.Dir(dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// attackLocalUsers: a local user acts on a mount with the rights the
// administrator lent them, or none. Mounted by root without --lend-to,
// another local user is refused every attempt (reading a file root just
// read, listing, writing, creating, deleting, chmod 4755, extended
// attributes, locks, the cache on disk) with EACCES, and the share's tree
// is unchanged. Lent to one user, that user reads what the files' mode
// bits let others read and nothing more (a 0600 file, a write, chmod are
// refused by the kernel), while a second user, not lent to, is refused
// everything by the agent, the kernel's caches warm from root's reads
// notwithstanding. Root, which mounted, keeps working throughout.
func attackLocalUsers(t *testing.T) {
	needRoot(t)
	lent, other := addLocalUser(t), addLocalUser(t)
	bin := workerBin(t)

	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	files := map[string]os.FileMode{"pub.txt": 0o644, "secret.txt": 0o600, "sub/inner.txt": 0o644}
	if err := os.MkdirAll(filepath.Join(root, "sub", "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, mode := range files {
		p := filepath.Join(root, name)
		if err := os.WriteFile(p, []byte("the content of "+name+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Setxattr(filepath.Join(root, "pub.txt"), "user.x", []byte("0"), 0); err != nil {
		t.Fatalf("the share's directory takes no user attributes: %v", err)
	}
	if err := os.Symlink("pub.txt", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}

	// rootWorks checks that root reads every file through the mount (and
	// so warms the kernel's caches with them).
	rootWorks := func(t *testing.T, dir string) {
		t.Helper()
		for name := range files {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if want := "the content of " + name + "\n"; err != nil || string(b) != want {
				t.Fatalf("root reads %s: %q, %v", name, b, err)
			}
		}
		if _, err := os.ReadDir(filepath.Join(dir, "sub")); err != nil {
			t.Fatalf("root lists: %v", err)
		}
	}

	// A name that is no local user is a mistake, said in one sentence.
	runPando(t, "", d.admin, "mount", "--lend-to", lent.name+",nosuch"+lent.name, t.TempDir()).
		fails(2, "--lend-to", "no local user", "nosuch"+lent.name)

	t.Run("lent to nobody", func(t *testing.T) {
		a := mountAgent(t, d.admin)
		openToOthers(t, a.dir)
		dir := filepath.Join(a.dir, "uva", "alpha")
		rootWorks(t, dir)
		before := shareTree(t, root)
		for _, u := range []localUser{lent, other} {
			u.expect(t, bin, "EACCES", everything(dir, a.cacheDir)...)
			u.expect(t, bin, "EACCES", userOp{Op: "stat", Path: a.dir + "/uva"}, userOp{Op: "ls", Path: a.dir},
				userOp{Op: "stat", Path: a.dir})
			u.expect(t, bin, "", userOp{Op: "statfs", Path: a.dir}) // the kernel answers with zeros
		}
		// FUSE's rule: the agent's uid with another gid is another user.
		rootOtherGid := localUser{name: "root with the group of " + lent.name, gid: lent.gid}
		rootOtherGid.expect(t, bin, "EACCES", userOp{Op: "read", Path: filepath.Join(dir, "pub.txt")})
		rootWorks(t, dir)
		sameTree(t, "after local users' attempts", before, shareTree(t, root))
		t.Logf("requests refused by the agent: %v (the kernel refuses the rest)", a.stats(t)["refused_local_users"])
	})

	t.Run("lent to one user", func(t *testing.T) {
		a := mountAgent(t, d.admin, "--lend-to", strconv.Itoa(int(lent.uid)))
		openToOthers(t, a.dir)
		dir := filepath.Join(a.dir, "uva", "alpha")
		rootWorks(t, dir)
		before := shareTree(t, root)

		// The second user is refused everything, by the agent: the kernel
		// holds root's pages and entries, and must not answer from them.
		rootWorks(t, dir)
		other.expect(t, bin, "EACCES", everything(dir, a.cacheDir)...)
		// The mount root's attributes and statfs say nothing: anyone has them.
		other.expect(t, bin, "", userOp{Op: "stat", Path: a.dir}, userOp{Op: "statfs", Path: a.dir})
		if n, _ := a.stats(t)["refused_local_users"].(float64); n == 0 {
			t.Errorf("the agent refused nothing: the kernel answered for it, or the attempts never got there")
		}
		// The administrator reads who was refused, and how to lend.
		if log := a.output(); !strings.Contains(log, "not lent to") || !strings.Contains(log, fmt.Sprintf("uid=%d", other.uid)) || !strings.Contains(log, "--lend-to") {
			t.Errorf("the agent's log does not name the refused uid %d and --lend-to:\n%s", other.uid, log)
		}
		if st := runPando(t, "", d.admin, "stats", "--cache-dir", a.cacheDir).ok().stdout; !strings.Contains(st, "refused:") {
			t.Errorf("pando stats does not show the refusals:\n%s", st)
		}
		// A descriptor root opened and passed on carries root's open,
		// as on any Unix file system.
		f, err := os.Open(filepath.Join(dir, "secret.txt"))
		if err != nil {
			t.Fatal(err)
		}
		res := other.as(t, bin, []userOp{{Op: "read-fd3"}}, f)
		f.Close()
		if res[0].Errno != "" || res[0].Data != "the content of secret.txt\n" {
			t.Errorf("%s reads a descriptor root passed on: %q, %s", other.name, res[0].Data, res[0].Errno)
		}
		// An O_PATH descriptor carries no open: opening the file through
		// it skips every lookup, the mode bits let others read, and the
		// kernel holds the file's pages; the agent refuses the open.
		fd, err := unix.Open(filepath.Join(dir, "pub.txt"), unix.O_PATH, 0)
		if err != nil {
			t.Fatal(err)
		}
		pathFile := os.NewFile(uintptr(fd), "pub.txt")
		res = other.as(t, bin, []userOp{{Op: "reopen-fd3"}}, pathFile)
		if res[0].Errno != "EACCES" {
			t.Errorf("%s opens pub.txt through an O_PATH descriptor root passed on: %q, %s; want EACCES", other.name, res[0].Data, res[0].Errno)
		}
		res = lent.as(t, bin, []userOp{{Op: "reopen-fd3"}}, pathFile)
		pathFile.Close()
		if res[0].Errno != "" || res[0].Data != "the content of pub.txt\n" {
			t.Errorf("%s opens pub.txt through an O_PATH descriptor: %q, %s", lent.name, res[0].Data, res[0].Errno)
		}

		// The lent user has what the mode bits give others.
		res = lent.expect(t, bin, "", userOp{Op: "read", Path: filepath.Join(dir, "pub.txt")},
			userOp{Op: "read", Path: filepath.Join(dir, "sub", "inner.txt")}, userOp{Op: "ls", Path: dir},
			userOp{Op: "stat", Path: filepath.Join(dir, "secret.txt")}, userOp{Op: "flock", Path: filepath.Join(dir, "pub.txt")})
		if res[0].Data != "the content of pub.txt\n" {
			t.Errorf("%s reads pub.txt as %q", lent.name, res[0].Data)
		}
		if !strings.Contains(res[2].Data, "secret.txt") {
			t.Errorf("%s lists %q", lent.name, res[2].Data)
		}
		lent.expect(t, bin, "EACCES", userOp{Op: "read", Path: filepath.Join(dir, "secret.txt")},
			userOp{Op: "write", Path: filepath.Join(dir, "pub.txt")}, userOp{Op: "create", Path: filepath.Join(dir, "new.txt")},
			userOp{Op: "remove", Path: filepath.Join(dir, "pub.txt")}, userOp{Op: "mkdir", Path: filepath.Join(dir, "newdir")},
			userOp{Op: "setxattr", Path: filepath.Join(dir, "pub.txt")},
			userOp{Op: "ls", Path: a.cacheDir})
		lent.expect(t, bin, "EPERM", userOp{Op: "chmod", Path: filepath.Join(dir, "pub.txt")},
			userOp{Op: "utimes", Path: filepath.Join(dir, "pub.txt")})
		sameTree(t, "after local users' attempts", before, shareTree(t, root))

		// Root keeps working, writes included.
		rootWorks(t, dir)
		if err := os.WriteFile(filepath.Join(dir, "by-root.txt"), []byte("root\n"), 0o644); err != nil {
			t.Fatalf("root writes: %v", err)
		}
		if b, err := os.ReadFile(filepath.Join(root, "by-root.txt")); err != nil || string(b) != "root\n" {
			t.Errorf("root's file at the share: %q, %v", b, err)
		}
		if err := os.Remove(filepath.Join(dir, "by-root.txt")); err != nil {
			t.Errorf("root deletes: %v", err)
		}
	})
}
