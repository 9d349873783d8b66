package e2e

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/testenv"
)

// smbGateway is a pando serve smb process and what its tests need.
type smbGateway struct {
	t              *testing.T
	p              *proc
	addr, share    string
	cacheDir, work string
}

// startSMB makes a gateway's credentials, SMB passwords for users
// ("name:password") and starts pando serve smb.
func startSMB(t *testing.T, d *domain, users ...string) *smbGateway {
	t.Helper()
	return startSMBWith(t, d, nil, users...)
}

// startSMBWith is startSMB with the further arguments extra of pando
// serve smb (exports).
func startSMBWith(t *testing.T, d *domain, extra []string, users ...string) *smbGateway {
	t.Helper()
	for _, tool := range []string{"smbclient", "/usr/sbin/smbd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (./dev test installs samba, smbclient and libnss-wrapper)", tool)
		}
	}
	web := filepath.Join(d.dir, "smbgw.json")
	d.pando(d.admin, "user", "add", "smbgw", "--gateway", "-o", web).ok()
	pw := filepath.Join(d.dir, "smbpasswd")
	for _, u := range users {
		name, pass, _ := strings.Cut(u, ":")
		runPando(t, pass+"\n", web, "serve", "smb-passwd", "--passwords", pw, name).ok()
	}
	s := &smbGateway{t: t, cacheDir: filepath.Join(d.dir, "smbcache"), work: t.TempDir()}
	// Whatever happens in the test, no mount of the gateway is left
	// (this runs after the gateway is stopped).
	t.Cleanup(func() {
		for _, u := range users {
			name, _, _ := strings.Cut(u, ":")
			if dir := filepath.Join(s.cacheDir, "smb", "mnt", name); mounted(dir) {
				syscall.Unmount(dir, syscall.MNT_DETACH)
			}
		}
	})
	var m []string
	s.p, m = start(t, `smb gateway \S+ of domain \S+ at smb://(\S+)/(\S+) `, nil, append([]string{"--config", web, "serve", "smb",
		"--listen", "127.0.0.1:0", "--cache-dir", s.cacheDir, "--passwords", pw}, extra...)...)
	s.addr, s.share = m[1], m[2]
	return s
}

// client runs smbclient as user (user%password) with the commands cmds
// and returns what it printed.
func (s *smbGateway) client(user, cmds string, opts ...string) string {
	host, port, _ := strings.Cut(s.addr, ":")
	cmd := exec.Command("smbclient", append([]string{"//" + host + "/" + s.share, "-p", port, "-U", user, "-c", cmds}, opts...)...)
	cmd.Dir = s.work
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// procsOf lists the live processes with a descriptor open below dir
// (Samba's all have its log there as their output; their command lines
// are rewritten, so they cannot be found by those).
func procsOf(dir string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if bytes.Contains(st, []byte(") Z ")) {
			continue
		}
		for _, fd := range fdTargets(pid) {
			if strings.HasPrefix(fd, dir+"/") {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// TestSMBClient: smbclient against pando serve smb (real Samba): alice
// lists, puts a 5 MiB file (on the share byte for byte), gets it back,
// makes and removes a directory, removes the file; what smbclient writes
// is read through a pando mount and the reverse within the consistency
// window; bob, without w, is refused with NT_STATUS_ACCESS_DENIED and
// nothing changes; a wrong password and an unknown user get
// NT_STATUS_LOGON_FAILURE; paths with .. in SMB's syntax reach nothing
// outside; the gateway serves on after each refusal; Samba ends with the
// gateway and its mounts are gone.
func TestSMBClient(t *testing.T) {
	d := newDomain(t, "d")
	root := d.addShare("data")
	alice := d.addUser("alice")
	d.addUser("bob")
	d.pando(d.admin, "acl", "set", "/d/data", "alice", "rlidwk", "bob", "rl").ok()
	os.WriteFile(filepath.Join(root, "pre.txt"), []byte("made at the share\n"), 0o644)
	hostFiles := func() map[string]string {
		m := map[string]string{}
		for _, f := range []string{"/etc/passwd", "/etc/group", "/etc/shadow"} {
			b, _ := os.ReadFile(f)
			for _, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(line, "alice:") || strings.HasPrefix(line, "bob:") {
					m[f+" "+line] = "an account"
				}
			}
		}
		maps.Copy(m, testenv.Tree(t, "/etc/samba"))
		maps.Copy(m, testenv.Tree(t, "/var/lib/samba"))
		return m
	}
	hostBefore := hostFiles()
	s := startSMB(t, d, "alice:alice-password", "bob:bob-password")
	const a, b = "alice%alice-password", "bob%bob-password"
	serving := func(after string) {
		t.Helper()
		if out := s.client(a, `ls data\pre.txt`); !strings.Contains(out, "pre.txt") {
			t.Fatalf("after %s, the gateway does not serve alice: %s", after, out)
		}
	}

	// list, get
	if out := s.client(a, `ls data\*`); !strings.Contains(out, "pre.txt") || strings.Contains(out, "NT_STATUS") {
		t.Fatalf("ls as alice: %s", out)
	}
	if out := s.client(a, `get data\pre.txt pre.txt`); strings.Contains(out, "NT_STATUS") {
		t.Fatalf("get as alice: %s", out)
	}
	if got, _ := os.ReadFile(filepath.Join(s.work, "pre.txt")); string(got) != "made at the share\n" {
		t.Errorf("get as alice gave %q", got)
	}
	// put 5 MiB, byte for byte at the share, and get it back
	big := make([]byte, 5<<20+12345)
	rand.Read(big)
	os.WriteFile(filepath.Join(s.work, "big.bin"), big, 0o644)
	if out := s.client(a, `put big.bin data\big.bin`); strings.Contains(out, "NT_STATUS") {
		t.Fatalf("put as alice: %s", out)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "big.bin")); !bytes.Equal(got, big) {
		t.Fatalf("the share holds %d bytes, not the %d put", len(got), len(big))
	}
	out := s.client(a, `get data\big.bin back.bin`)
	if strings.Contains(out, "NT_STATUS") {
		t.Fatalf("get of big.bin: %s", out)
	}
	if got, _ := os.ReadFile(filepath.Join(s.work, "back.bin")); !bytes.Equal(got, big) {
		t.Errorf("got back %d bytes, not the %d put: %s", len(got), len(big), out)
	}
	// mkdir, rm, rmdir
	if out := s.client(a, `mkdir data\made; put pre.txt data\made\in.txt`); strings.Contains(out, "NT_STATUS") {
		t.Fatalf("mkdir as alice: %s", out)
	}
	if fi, err := os.Stat(filepath.Join(root, "made", "in.txt")); err != nil || fi.Size() != 18 {
		t.Fatalf("mkdir and put made no made/in.txt at the share: %v", err)
	}
	if out := s.client(a, `rm data\big.bin; rm data\made\in.txt; rmdir data\made`); strings.Contains(out, "NT_STATUS") {
		t.Fatalf("rm as alice: %s", out)
	}
	for _, p := range []string{"big.bin", "made"} {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s is still at the share after rm", p)
		}
	}

	// Through a mount, within the consistency window (3 s both sides).
	mnt := mountAgent(t, alice)
	seen := func(what string, read func() (string, error), want string) {
		t.Helper()
		start := time.Now()
		var got string
		var err error
		for time.Since(start) < 15*time.Second {
			if got, err = read(); err == nil && got == want {
				t.Logf("%s: seen after %s", what, time.Since(start).Round(10*time.Millisecond))
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("%s: not seen within 15 s: %q, %v", what, got, err)
	}
	os.WriteFile(filepath.Join(s.work, "from-smb.txt"), []byte("written through SMB\n"), 0o644)
	if out := s.client(a, `put from-smb.txt data\from-smb.txt`); strings.Contains(out, "NT_STATUS") {
		t.Fatalf("put as alice: %s", out)
	}
	seen("SMB to the mount", func() (string, error) {
		b, err := os.ReadFile(filepath.Join(mnt.dir, "d", "data", "from-smb.txt"))
		return string(b), err
	}, "written through SMB\n")
	if err := os.WriteFile(filepath.Join(mnt.dir, "d", "data", "from-mount.txt"), []byte("written through the mount\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	seen("the mount to SMB", func() (string, error) {
		os.Remove(filepath.Join(s.work, "got.txt"))
		s.client(a, `get data\from-mount.txt got.txt`)
		b, err := os.ReadFile(filepath.Join(s.work, "got.txt"))
		return string(b), err
	}, "written through the mount\n")

	// bob may read, not write.
	if out := s.client(b, `get data\pre.txt bob.txt`); strings.Contains(out, "NT_STATUS") {
		t.Errorf("get as bob: %s", out)
	}
	before := testenv.Tree(t, root)
	for _, c := range []string{`put pre.txt data\bob.txt`, `put pre.txt data\pre.txt`, `mkdir data\bobdir`, `rm data\from-smb.txt`,
		`rename data\pre.txt data\moved.txt`} {
		if out := s.client(b, c); !strings.Contains(out, "NT_STATUS_ACCESS_DENIED") {
			t.Errorf("bob's %q: %s", c, out)
		}
		serving("bob's " + c)
	}
	if after := testenv.Tree(t, root); !maps.Equal(before, after) {
		t.Errorf("bob's refused writes changed the shares' directory:\nbefore %v\nafter  %v", before, after)
	}

	// Wrong passwords and users.
	for _, u := range []string{"alice%wrong-password", "carol%alice-password", "bob%alice-password", "alice%"} {
		if out := s.client(u, `ls`); !strings.Contains(out, "NT_STATUS_LOGON_FAILURE") {
			t.Errorf("sign-in as %s: %s", u, out)
		}
		serving("sign-in as " + u)
	}

	// Only SMB 3, and encrypted: smbstatus (with the gateway's Samba
	// configuration) shows a session held open, even of a client that
	// would not ask for encryption, as SMB 3 with AES.
	host, port, _ := strings.Cut(s.addr, ":")
	held := exec.Command("smbclient", "//"+host+"/"+s.share, "-p", port, "-U", a, "--option=client smb encrypt=off")
	stdin, _ := held.StdinPipe()
	held.Dir = s.work
	if err := held.Start(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, `ls data\pre.txt`)
	var status string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		st := exec.Command("smbstatus", "-b", "-s", filepath.Join(s.cacheDir, "smb/samba/smb.conf"))
		lib, _ := filepath.Glob("/usr/lib/*/libnss_wrapper.so")
		st.Env = append(os.Environ(), "LD_PRELOAD="+strings.Join(lib, ""), "NSS_WRAPPER_PASSWD="+filepath.Join(s.cacheDir, "smb/samba/passwd"),
			"NSS_WRAPPER_GROUP="+filepath.Join(s.cacheDir, "smb/samba/group"))
		out, _ := st.CombinedOutput()
		if status = string(out); strings.Contains(status, "alice ") {
			break
		}
	}
	fmt.Fprintln(stdin, "quit")
	stdin.Close()
	held.Wait()
	if m := regexp.MustCompile(`alice .* SMB3_\d+ +AES-\d+-(GCM|CCM).*`).FindString(status); m == "" {
		t.Errorf("alice's session is not SMB 3 encrypted:\n%s", status)
	} else {
		t.Logf("smbstatus: %s", m)
	}
	for _, o := range [][]string{{"--option=client max protocol=SMB2_10"}, {"--option=client min protocol=NT1", "--option=client max protocol=NT1"}} {
		if out := s.client(a, `ls data\*`, o...); !strings.Contains(out, "NT_STATUS_") || strings.Contains(out, "pre.txt") {
			t.Errorf("a client with %s: %s", o, out)
		} else {
			t.Logf("%s: %s", o, strings.TrimSpace(out))
		}
		serving(strings.Join(o, " "))
	}

	// Paths that climb out, in SMB's syntax: nothing outside is reached.
	before = testenv.Tree(t, root)
	os.WriteFile(filepath.Join(s.work, "esc.txt"), []byte("escape\n"), 0o644)
	for _, c := range []string{
		`get ..\..\..\..\etc\passwd p1`, `get \..\..\etc\passwd p2`, `get data\..\..\..\etc\passwd p3`,
		`cd ..\..\..\..; get etc\passwd p4`, `put esc.txt ..\..\esc.txt`, `put esc.txt \..\esc.txt`,
		`put esc.txt data\..\..\..\esc.txt`, `mkdir ..\..\escdir`,
	} {
		out := s.client(a, c)
		if !strings.Contains(out, "NT_STATUS_") {
			t.Errorf("%q was not refused: %s", c, out)
		}
		t.Logf("%s: %s", c, strings.TrimSpace(out))
		serving(c)
	}
	// smbclient itself takes a listing's .. at the share's root as the
	// root, as Windows does: refused or the share's root, nothing else.
	for _, c := range []string{`ls ..\..\*`, `ls \..\..\..\*`, `cd ..\..; ls`} {
		out := s.client(a, c)
		if !strings.Contains(out, "NT_STATUS_") {
			var names []string
			for _, line := range strings.Split(out, "\n") {
				if f := strings.Fields(line); len(f) > 1 && (f[1] == "D" || f[1] == "N" || f[1] == "A") {
					names = append(names, f[0])
				}
			}
			if !slices.Equal(names, []string{".", "..", "data"}) {
				t.Errorf("%q listed %v: %s", c, names, out)
			}
		}
		serving(c)
	}
	for _, p := range []string{"p1", "p2", "p3", "p4"} {
		if _, err := os.Stat(filepath.Join(s.work, p)); err == nil {
			t.Errorf("a path with .. fetched %s", p)
		}
	}
	if after := testenv.Tree(t, root); !maps.Equal(before, after) {
		t.Errorf("paths with .. changed the share:\nbefore %v\nafter  %v", before, after)
	}
	// Nothing was made where a climb from the share or from a mount
	// would land.
	for _, dir := range []string{"/", filepath.Dir(root), d.dir, s.cacheDir, filepath.Join(s.cacheDir, "smb"),
		filepath.Join(s.cacheDir, "smb", "mnt"), filepath.Join(s.cacheDir, "smb", "mnt", "alice")} {
		for _, n := range []string{"esc.txt", "escdir"} {
			if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
				t.Errorf("a path with .. made %s", filepath.Join(dir, n))
			}
		}
	}

	// Symbolic links that lead out of the share (made through alice's
	// mount) are not followed; one inside it is.
	for name, target := range map[string]string{"in-link": "pre.txt", "etc-link": "/etc", "up-link": "../../../../../../../../etc"} {
		if err := os.Symlink(target, filepath.Join(mnt.dir, "d", "data", name)); err != nil {
			t.Fatal(err)
		}
	}
	seen("a link inside the share, through SMB", func() (string, error) {
		os.Remove(filepath.Join(s.work, "in.txt"))
		s.client(a, `get data\in-link in.txt`)
		b, err := os.ReadFile(filepath.Join(s.work, "in.txt"))
		return string(b), err
	}, "made at the share\n")
	for _, c := range []string{`get data\etc-link\passwd p5`, `get data\up-link\passwd p6`, `ls data\etc-link\*`, `ls data\up-link\*`,
		`put esc.txt data\etc-link\esc.txt`, `put esc.txt data\up-link\esc.txt`} {
		out := s.client(a, c)
		if !strings.Contains(out, "NT_STATUS_") || strings.Contains(out, "passwd") && strings.HasPrefix(c, "ls") {
			t.Errorf("%q was not refused: %s", c, out)
		}
		t.Logf("%s: %s", c, strings.TrimSpace(out))
		serving(c)
	}
	for _, p := range []string{filepath.Join(s.work, "p5"), filepath.Join(s.work, "p6"), "/etc/esc.txt"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("a link out of the share reached %s", p)
		}
	}

	// A user name in other letters signs in as the same user (Samba's
	// names are case-blind), and reaches that user's mount or nothing.
	if out := s.client("ALICE%alice-password", `ls data\*`); !strings.Contains(out, "pre.txt") && !strings.Contains(out, "NT_STATUS_") {
		t.Errorf("as ALICE: %s", out)
	}

	// No account, group or Samba file of the host was made or changed.
	if !maps.Equal(hostBefore, hostFiles()) {
		t.Error("the host's accounts or Samba files changed")
	}

	// Samba ends with the gateway; the mounts are gone.
	if len(procsOf(s.cacheDir)) == 0 {
		t.Fatal("no Samba process names the gateway's configuration")
	}
	s.p.stop(t)
	if pids := procsOf(s.cacheDir); len(pids) != 0 {
		t.Errorf("Samba processes %v outlive the gateway", pids)
	}
	for _, u := range []string{"alice", "bob"} {
		if mounted(filepath.Join(s.cacheDir, "smb", "mnt", u)) {
			t.Errorf("%s's mount outlives the gateway", u)
		}
	}
}

// TestSMBGatewayKilled: a gateway killed (SIGKILL) takes Samba with it,
// and the next one starts over the dead mounts it left; a user's mistakes
// with pando serve smb (a bad --export among them) and smb-passwd get one
// sentence each; users added,
// changed and removed in the password file are followed.
func TestSMBGatewayKilled(t *testing.T) {
	d := newDomain(t, "d")
	root := d.addShare("data")
	alice := d.addUser("alice")
	d.pando(d.admin, "acl", "set", "/d/data", "alice", "rlidwk").ok()
	os.WriteFile(filepath.Join(root, "pre.txt"), []byte("made at the share\n"), 0o644)
	s := startSMB(t, d, "alice:alice-password")
	// A user's mistakes get one sentence.
	web, pw := filepath.Join(d.dir, "smbgw.json"), filepath.Join(d.dir, "smbpasswd")
	d.pando(web, "serve", "smb", "--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "c0")).fails(2, "--passwords")
	d.pando(alice, "serve", "smb", "--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "c0"), "--passwords", pw).fails(1, "alice@d", "--gateway")
	d.pando(web, "serve", "smb", "--listen", "localhost:0", "--cache-dir", filepath.Join(d.dir, "c0"), "--passwords", pw).fails(1, "IP address")
	d.pando(web, "serve", "smb", "--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "c0"), "--passwords", pw, "--encrypt", "off").fails(1, "required or desired")
	for _, ex := range [][2]string{{"da/ta=/d/data", "share name"}, {"IPC$=/d/data", "keeps for itself"}, {"data=/e/data", "clean global path"},
		{"data=/d/../etc", "clean global path"}, {"data", "NAME=PATH"}} {
		d.pando(web, "serve", "smb", "--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "c0"), "--passwords", pw, "--export", ex[0]).fails(2, ex[1])
	}
	os.Chmod(pw, 0o644)
	d.pando(web, "serve", "smb", "--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "c0"), "--passwords", pw).fails(1, "chmod 600")
	os.Chmod(pw, 0o600)
	runPando(t, "short\n", web, "serve", "smb-passwd", "--passwords", pw, "bob").fails(1, "shorter than 8")
	runPando(t, "long enough\n", web, "serve", "smb-passwd", "--passwords", pw, "Bob").fails(1, "lower-case")
	if out := s.client("alice%alice-password", `ls data\*`); !strings.Contains(out, "pre.txt") {
		t.Fatalf("ls as alice: %s", out)
	}
	s.p.cmd.Process.Signal(syscall.SIGKILL)
	<-s.p.done
	var left []int
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if left = procsOf(s.cacheDir); len(left) == 0 {
			break
		}
	}
	if len(left) != 0 {
		t.Errorf("Samba processes %v outlive the killed gateway", left)
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	p, _ := start(t, `smb gateway \S+ of domain \S+ at smb://`, nil, "--config", web, "serve", "smb",
		"--listen", s.addr, "--cache-dir", s.cacheDir, "--passwords", pw, "--metrics", "127.0.0.1:0")
	s.p = p
	if out := s.client("alice%alice-password", `ls data\*`); !strings.Contains(out, "pre.txt") {
		t.Fatalf("ls as alice after a restart: %s\n%s", out, p.output())
	}
	// Its figures are a gateway's: alice is a user served.
	var metrics string
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end) && metrics == ""; time.Sleep(100 * time.Millisecond) {
		metrics = between(p.output(), "metrics at http://", "/metrics")
	}
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatalf("the SMB gateway's metrics: %v\n%s", err, p.output())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "pando_gateway_users 1") {
		t.Errorf("the SMB gateway's metrics do not count alice:\n%.2000s", body)
	}

	// The password file is followed: a user added is served, a password
	// changed holds, a user removed is refused and unmounted.
	d.addUser("carol")
	d.pando(d.admin, "acl", "set", "/d/data", "carol", "rl").ok()
	runPando(t, "carol-password\n", web, "serve", "smb-passwd", "--passwords", pw, "carol").ok()
	within := func(what, user, want string) {
		t.Helper()
		var out string
		for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			if out = s.client(user, `ls data\pre.txt`); strings.Contains(out, want) {
				return
			}
		}
		t.Errorf("%s: not within 15 s: %s", what, out)
	}
	within("carol added", "carol%carol-password", "pre.txt")
	runPando(t, "carol-password-2\n", web, "serve", "smb-passwd", "--passwords", pw, "carol").ok()
	within("carol's new password", "carol%carol-password-2", "pre.txt")
	if out := s.client("carol%carol-password", `ls`); !strings.Contains(out, "NT_STATUS_LOGON_FAILURE") {
		t.Errorf("carol's old password: %s", out)
	}
	b, _ := os.ReadFile(pw)
	var keep []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.HasPrefix(line, "alice:") {
			keep = append(keep, line)
		}
	}
	os.WriteFile(pw, []byte(strings.Join(keep, "\n")+"\n"), 0o600)
	within("alice removed", "alice%alice-password", "NT_STATUS_LOGON_FAILURE")
	for end := time.Now().Add(5 * time.Second); mounted(filepath.Join(s.cacheDir, "smb/mnt/alice")) && time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
	}
	if mounted(filepath.Join(s.cacheDir, "smb/mnt/alice")) {
		t.Error("alice's mount is still there after she was removed")
	}
	within("carol after alice was removed", "carol%carol-password-2", "pre.txt")
}
