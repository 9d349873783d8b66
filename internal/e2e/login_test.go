package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/agent"
	"pando.dev/pando/internal/config"
)

// postLogin sends body to an agent's login socket as the process's own
// uid (a local user's attempt) and returns the answer; a refusal is an
// error carrying the agent's sentence.
func postLogin(sock, body string) (string, error) {
	resp, err := agent.SocketClient(sock, 30*time.Second).Post("http://agent/login", "application/json", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("refused: %s", strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// runAs runs the pando binary bin as u and returns its output and exit
// code.
func (u localUser) runPando(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running pando as %s: %v", u.name, err)
	}
	return string(out), code
}

// giveTo copies a file into dir, readable only by u.
func giveTo(t *testing.T, u localUser, src, dir string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, u.name+"-"+filepath.Base(src))
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dst, int(u.uid), int(u.gid)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestLogin: two local users on one mount, each logged in with their own
// credential (pando login), act with their own rights: alice (rw on the
// directory) writes, and her file is hers at the share; bob (r) reads
// it, and every change he tries is refused with nothing changed at the
// share. A uid with no login is refused, or served as the mount's own
// principal when --lend-to names it; a login with a key that is not the
// certificate's, a login that claims another uid, and a revoked user's
// login change nothing; after pando logout the uid is refused again.
func TestLogin(t *testing.T) {
	needRoot(t)
	ua, ub, uc, ul := addLocalUser(t), addLocalUser(t), addLocalUser(t), addLocalUser(t)
	worker := workerBin(t)
	binDir := filepath.Dir(worker)
	bin := filepath.Join(binDir, "pando")
	if b, err := os.ReadFile(pandoBin); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}

	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	aliceCfg, bobCfg := d.addUser("alice"), d.addUser("bob")
	if err := os.MkdirAll(filepath.Join(root, "proj"), 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(root, "proj"), 0o777)
	// A file every mode bit lets anyone write: only the grid's rights
	// keep bob from it.
	if err := os.WriteFile(filepath.Join(root, "proj", "open.txt"), []byte("open\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(root, "proj", "open.txt"), 0o666)
	d.pando(d.admin, "acl", "set", "/uva/alpha/proj", "alice", "rlidwk").ok()
	d.pando(d.admin, "acl", "set", "/uva/alpha/proj", "bob", "rl").ok()

	// A mount without --logins says so.
	plain := mountAgent(t, d.admin)
	openToOthers(t, plain.dir)
	if out, code := ua.runPando(t, bin, "--config", giveTo(t, ua, aliceCfg, binDir), "login", "--mount", plain.dir); code == 0 || !strings.Contains(out, "does not accept logins") {
		t.Errorf("pando login at a mount without --logins: exit %d: %s", code, out)
	}

	// Another local user plants a socket where a root agent's would be
	// if it kept it in /tmp: a login sends it nothing, as its server is
	// not the uid that mounted the file system.
	planted := plantLoginSocket(t, uc, plain.dir)
	if out, code := ua.runPando(t, bin, "--config", giveTo(t, ua, aliceCfg, binDir), "login", "--mount", plain.dir); code == 0 || !strings.Contains(out, "not served by the mount's agent") {
		t.Errorf("pando login with a planted socket: exit %d: %s", code, out)
	}
	if b, err := os.ReadFile(planted); err != nil || len(b) != 0 {
		t.Errorf("the planted socket received %d bytes (%v)", len(b), err)
	}

	a := mountAgent(t, d.admin, "--logins", "--lend-to", strconv.Itoa(int(ul.uid)))
	openToOthers(t, a.dir)
	dir := filepath.Join(a.dir, "uva", "alpha", "proj")
	if _, err := os.ReadDir(dir); err != nil { // root, the agent's own uid
		t.Fatal(err)
	}

	// Before any login: a uid not lent is refused, the lent one reads.
	before := shareTree(t, root)
	ua.expect(t, worker, "EACCES", userOp{Op: "ls", Path: dir}, userOp{Op: "put", Path: filepath.Join(dir, "a.txt"), Path2: "x"})
	ul.expect(t, worker, "", userOp{Op: "read", Path: filepath.Join(dir, "open.txt")})
	sameTree(t, "before any login", before, shareTree(t, root))

	// A credential of another domain, and a directory no agent serves.
	other := newDomain(t, "vu")
	eveCfg := other.addUser("eve")
	if out, code := ua.runPando(t, bin, "--config", giveTo(t, ua, eveCfg, binDir), "login", "--mount", a.dir); code == 0 || !strings.Contains(out, "not one of domain uva") {
		t.Errorf("a login with another domain's credential: exit %d: %s", code, out)
	}
	if out, code := ua.runPando(t, bin, "login", "--mount", binDir); code == 0 || !strings.Contains(out, "no pando agent is mounted at") {
		t.Errorf("pando login where no agent is: exit %d: %s", code, out)
	}
	ua.expect(t, worker, "EACCES", userOp{Op: "ls", Path: dir})
	sameTree(t, "after refused logins", before, shareTree(t, root))

	aliceFile := giveTo(t, ua, aliceCfg, binDir)
	if out, code := ua.runPando(t, bin, "--config", aliceFile, "login", "--mount", a.dir); code != 0 || !strings.Contains(out, "alice@uva") {
		t.Fatalf("alice's pando login: exit %d: %s", code, out)
	}
	if out, code := ub.runPando(t, bin, "--config", giveTo(t, ub, bobCfg, binDir), "login"); code != 0 || !strings.Contains(out, "bob@uva") {
		t.Fatalf("bob's pando login (the only mount with logins, no --mount): exit %d: %s", code, out)
	}
	if out, _ := uc.runPando(t, bin, "login", "--status", "--mount", a.dir); !strings.Contains(out, "alice@uva") || !strings.Contains(out, "bob@uva") {
		t.Errorf("pando login --status: %s", out)
	}

	// alice writes; the file is hers at the share and shows as her uid.
	ua.expect(t, worker, "", userOp{Op: "put", Path: filepath.Join(dir, "a.txt"), Path2: "alice wrote this\n"})
	if b, err := os.ReadFile(filepath.Join(root, "proj", "a.txt")); err != nil || string(b) != "alice wrote this\n" {
		t.Fatalf("alice's file at the share: %q, %v", b, err)
	}
	if out := d.pando(d.admin, "ls", "-l", "/uva/alpha/proj").ok().stdout; !strings.Contains(out, "alice@uva") {
		t.Errorf("alice's file is not alice's at the share:\n%s", out)
	}
	// Each login is a client of its own: the mount's own principal sees
	// alice's write within the consistency window (3 s).
	var st unix.Stat_t
	var err error
	waitFor(10*time.Second, func() bool { err = unix.Stat(filepath.Join(dir, "a.txt"), &st); return err == nil })
	if err != nil || st.Uid != ua.uid {
		t.Errorf("alice's file shows uid %d (%v), want %d", st.Uid, err, ua.uid)
	}

	// bob reads it, and may change nothing.
	res := ub.expect(t, worker, "", userOp{Op: "read", Path: filepath.Join(dir, "a.txt")}, userOp{Op: "read", Path: filepath.Join(dir, "open.txt")})
	if res[0].Data != "alice wrote this\n" {
		t.Errorf("bob reads %q", res[0].Data)
	}
	before = shareTree(t, root)
	ub.expect(t, worker, "EACCES",
		userOp{Op: "write", Path: filepath.Join(dir, "open.txt")},
		userOp{Op: "truncate", Path: filepath.Join(dir, "open.txt")},
		userOp{Op: "put", Path: filepath.Join(dir, "b.txt"), Path2: "bob\n"},
		userOp{Op: "remove", Path: filepath.Join(dir, "open.txt")},
		userOp{Op: "rename", Path: filepath.Join(dir, "open.txt"), Path2: filepath.Join(dir, "moved.txt")},
		userOp{Op: "mkdir", Path: filepath.Join(dir, "bobdir")},
		userOp{Op: "symlink", Path: filepath.Join(dir, "bl")},
	)
	// Times and modes of a file that is not his: the kernel refuses first.
	ub.expect(t, worker, "EPERM", userOp{Op: "utimes", Path: filepath.Join(dir, "open.txt")}, userOp{Op: "chmod", Path: filepath.Join(dir, "open.txt")})
	sameTree(t, "after bob's attempts", before, shareTree(t, root))

	// A uid with no login: refused; the lent one is the mount's principal.
	uc.expect(t, worker, "EACCES", userOp{Op: "ls", Path: dir}, userOp{Op: "read", Path: filepath.Join(dir, "a.txt")},
		userOp{Op: "put", Path: filepath.Join(dir, "c.txt"), Path2: "c"})
	ul.expect(t, worker, "", userOp{Op: "read", Path: filepath.Join(dir, "a.txt")})
	sameTree(t, "after a uid with no login", before, shareTree(t, root))

	// bob sends alice's certificate with his own key; then a login that
	// claims alice's uid. Neither changes whom bob's uid acts as.
	sockPath := agent.LoginSocket(agent.LoginSocketDir(0), a.dir)
	alice, err := config.Load(aliceCfg)
	if err != nil {
		t.Fatal(err)
	}
	bob, err := config.Load(bobCfg)
	if err != nil {
		t.Fatal(err)
	}
	body := func(cert, key string, uid *int) string {
		b, _ := json.Marshal(map[string]any{"cert": cert, "key": key, "uid": uid})
		return string(b)
	}
	wrongKey := ub.as(t, worker, []userOp{{Op: "post-login", Path: sockPath, Path2: body(alice.Cert, bob.Key, nil)}})
	if !strings.Contains(wrongKey[0].Errno, "private key") {
		t.Errorf("bob's login with alice's certificate and his key: %+v", wrongKey[0])
	}
	garbage := ub.as(t, worker, []userOp{{Op: "post-login", Path: sockPath, Path2: body("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", bob.Key, nil)}})
	if garbage[0].Errno == "" {
		t.Errorf("a damaged certificate was accepted: %+v", garbage[0])
	}
	auid := int(ua.uid)
	claim := ub.as(t, worker, []userOp{{Op: "post-login", Path: sockPath, Path2: body(bob.Cert, bob.Key, &auid)}})
	if claim[0].Errno != "" || !strings.Contains(claim[0].Data, fmt.Sprintf(`"uid":%d`, ub.uid)) {
		t.Errorf("bob's login claiming uid %d: %+v", auid, claim[0])
	}
	ub.expect(t, worker, "EACCES", userOp{Op: "put", Path: filepath.Join(dir, "b.txt"), Path2: "bob\n"})
	ua.expect(t, worker, "", userOp{Op: "put", Path: filepath.Join(dir, "a2.txt"), Path2: "alice again\n"})
	before = shareTree(t, root)
	ub.expect(t, worker, "EACCES", userOp{Op: "put", Path: filepath.Join(dir, "b.txt"), Path2: "bob\n"})
	sameTree(t, "after bob's forged logins", before, shareTree(t, root))

	// Root logs a uid in, and out, for it: uc with bob's credential reads
	// and may not write; then uc is refused again. uc itself may not.
	if out, code := uc.runPando(t, bin, "--config", giveTo(t, uc, bobCfg, binDir), "login", "--uid", strconv.Itoa(int(ua.uid)), "--mount", a.dir); code == 0 || !strings.Contains(out, "only root") {
		t.Errorf("pando login --uid by a user: exit %d: %s", code, out)
	}
	runPando(t, "", bobCfg, "login", "--uid", strconv.Itoa(int(uc.uid)), "--mount", a.dir).ok()
	uc.expect(t, worker, "", userOp{Op: "read", Path: filepath.Join(dir, "a.txt")})
	uc.expect(t, worker, "EACCES", userOp{Op: "put", Path: filepath.Join(dir, "c.txt"), Path2: "c"})
	runPando(t, "", bobCfg, "logout", "--uid", strconv.Itoa(int(uc.uid)), "--mount", a.dir).ok()
	uc.expect(t, worker, "EACCES", userOp{Op: "read", Path: filepath.Join(dir, "a.txt")})
	sameTree(t, "after root's login for another uid", before, shareTree(t, root))

	// Logout: alice's uid is refused again, and its cache is gone.
	if out, code := ua.runPando(t, bin, "logout", "--mount", a.dir); code != 0 || !strings.Contains(out, "alice@uva") {
		t.Errorf("pando logout: exit %d: %s", code, out)
	}
	ua.expect(t, worker, "EACCES", userOp{Op: "read", Path: filepath.Join(dir, "a.txt")}, userOp{Op: "put", Path: filepath.Join(dir, "a3.txt"), Path2: "x"})
	if left, _ := filepath.Glob(filepath.Join(a.cacheDir, "logins", strconv.Itoa(int(ua.uid))+"-*")); len(left) != 0 {
		t.Errorf("alice's login cache is still there after logout: %v", left)
	}
	sameTree(t, "after alice's logout", before, shareTree(t, root))

	// A revoked user: the share refuses what their login asks, and a new
	// login is refused by the controller.
	d.pando(d.admin, "user", "revoke", "bob").ok()
	ok := waitFor(15*time.Second, func() bool {
		r := ub.as(t, worker, []userOp{{Op: "read", Path: filepath.Join(dir, "open.txt")}})
		return r[0].Errno != ""
	})
	if !ok {
		t.Errorf("bob, revoked, still reads through his login")
	}
	ub.expect(t, worker, "EACCES", userOp{Op: "put", Path: filepath.Join(dir, "b.txt"), Path2: "bob\n"})
	// The agent finds the revocation and drops bob's login and cache.
	bobCache := filepath.Join(a.cacheDir, "logins", strconv.Itoa(int(ub.uid))+"-*")
	if !waitFor(30*time.Second, func() bool { left, _ := filepath.Glob(bobCache); return len(left) == 0 }) {
		t.Errorf("bob's login cache is still there 30 s after he was revoked")
	}
	if out, _ := uc.runPando(t, bin, "login", "--status", "--mount", a.dir); strings.Contains(out, "bob@uva") {
		t.Errorf("bob, revoked, is still logged in: %s", out)
	}
	if out, code := ub.runPando(t, bin, "--config", giveTo(t, ub, bobCfg, binDir), "login", "--mount", a.dir); code == 0 || !strings.Contains(out, "refuses") {
		t.Errorf("a revoked user's login: exit %d: %s", code, out)
	}
	sameTree(t, "after bob was revoked", before, shareTree(t, root))
}

// plantLoginSocket has u serve a socket at the place in /tmp where an
// agent of root's mounted at mnt would keep its login socket if it kept
// it there, recording what it receives; it returns the record's path.
func plantLoginSocket(t *testing.T, u localUser, mnt string) string {
	t.Helper()
	dir := filepath.Join("/tmp", "pando-login-0")
	if _, err := os.Lstat(dir); err == nil {
		t.Fatalf("%s exists already", dir)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chown(dir, int(u.uid), int(u.gid))
	rec := filepath.Join(dir, "received")
	sock := agent.LoginSocket(dir, mnt)
	script := `import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
os.chmod(sys.argv[1], 0o666)
s.listen(8)
open(sys.argv[2], "wb").close()
s.settimeout(120)
while True:
    c, _ = s.accept()
    c.settimeout(5)
    try:
        while True:
            d = c.recv(65536)
            if not d:
                break
            open(sys.argv[2], "ab").write(d)
    except OSError:
        pass
    c.close()
`
	cmd := exec.Command("/usr/bin/python3", "-c", script, sock, rec)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{}}, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitFor(10*time.Second, func() bool { _, err := os.Stat(rec); return err == nil })
	if _, err := os.Stat(rec); err != nil {
		t.Fatalf("the planted socket did not start: %v", err)
	}
	return rec
}
