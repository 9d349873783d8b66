package gateway

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wire"
)

// litmusSuites are the suites of the WebDAV compliance suite litmus.
var litmusSuites = []string{"basic", "copymove", "props", "locks", "http"}

// litmusKnown are the tests known to fail, and why (docs/gateways.md):
// none.
var litmusKnown = map[string]string{}

// TestWebDAVLitmus runs litmus against pando serve webdav's front end,
// signed in as alice with a password over TLS, and reports its counts.
func TestWebDAVLitmus(t *testing.T) {
	needTool(t, "litmus")
	e := newEnv(t, true)
	cmd := exec.Command("litmus", "-k", e.url+"/d/data/", "alice", "alice-secret-pw")
	cmd.Dir = t.TempDir() // its debug.log and child.log
	out, err := cmd.CombinedOutput()
	t.Logf("litmus:\n%s", out)
	sums := regexp.MustCompile("<- summary for `(\\w+)': of (\\d+) tests run: (\\d+) passed, (\\d+) failed").FindAllStringSubmatch(string(out), -1)
	got := map[string][2]int{}
	for _, m := range sums {
		run, _ := strconv.Atoi(m[2])
		passed, _ := strconv.Atoi(m[3])
		got[m[1]] = [2]int{passed, run}
	}
	var line []string
	for _, s := range litmusSuites {
		line = append(line, fmt.Sprintf("%s %d/%d", s, got[s][0], got[s][1]))
	}
	t.Logf("litmus passed: %s (err %v)", strings.Join(line, ", "), err)
	failed := 0
	for _, m := range regexp.MustCompile(`\d+\. (\w+)\.*\s+\d+\. \w+\.* FAIL`).FindAllStringSubmatch(string(out), -1) {
		failed++
		if _, ok := litmusKnown[m[1]]; !ok {
			t.Errorf("litmus test %s fails", m[1])
		}
	}
	for _, s := range litmusSuites {
		if got[s][1] == 0 {
			t.Errorf("litmus %s did not run", s)
		}
		failed -= got[s][1] - got[s][0]
	}
	if failed != 0 {
		t.Errorf("litmus: the failures counted in the summaries and in the lines differ by %d", failed)
	}
}

// TestWebDAVRefusals: through WebDAV, a user without the rights changes
// nothing, hostile Destinations and If headers are refused, and XML
// bombs get 400 or 413 while the gateway serves on.
func TestWebDAVRefusals(t *testing.T) {
	needTool(t, "curl")
	e := newEnv(t, true)
	os.WriteFile(filepath.Join(e.root, "keep.txt"), []byte("kept"), 0o644)
	os.Mkdir(filepath.Join(e.root, "dir"), 0o755)
	outside := filepath.Dir(e.root)
	before, beforeOut := testenv.Tree(t, e.root), exports(testenv.Tree(t, outside))
	body := filepath.Join(e.dir, "payload")
	os.WriteFile(body, []byte("payload"), 0o644)
	xmlFile := func(name, s string) string {
		p := filepath.Join(e.dir, name)
		os.WriteFile(p, []byte(s), 0o644)
		return p
	}
	proppatch := xmlFile("pp.xml", `<?xml version="1.0"?><D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><x:k xmlns:x="urn:x">v</x:k></D:prop></D:set></D:propertyupdate>`)
	deep := xmlFile("deep.xml", `<?xml version="1.0"?><D:propfind xmlns:D="DAV:">`+strings.Repeat("<D:prop>", 200)+strings.Repeat("</D:prop>", 200)+`</D:propfind>`)
	big := xmlFile("big.xml", `<?xml version="1.0"?><D:propfind xmlns:D="DAV:"><D:prop>`+strings.Repeat("<D:getetag/>", 60_000)+`</D:prop></D:propfind>`)
	laughs := xmlFile("laughs.xml", `<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]><D:propfind xmlns:D="DAV:"><D:prop><x>&b;</x></D:prop></D:propfind>`)
	malformed := xmlFile("bad.xml", `<?xml version="1.0"?><D:propfind xmlns:D="DAV:"><D:prop>`)
	lock := xmlFile("lock.xml", `<?xml version="1.0"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype></D:lockinfo>`)
	dest := func(p string) string { return "Destination: " + e.url + p }

	for _, c := range []struct {
		name, user string
		args       []string
		want       int
	}{
		{"bob MKCOL", "bob", []string{"-X", "MKCOL", e.url + "/d/data/newdir"}, 403},
		{"bob PUT", "pw:bob", []string{"-T", body, e.url + "/d/data/new.txt"}, 403},
		{"bob PUT over", "bob", []string{"-T", body, e.url + "/d/data/keep.txt"}, 403},
		{"bob MOVE", "bob", []string{"-X", "MOVE", "-H", dest("/d/data/moved.txt"), e.url + "/d/data/keep.txt"}, 403},
		{"bob COPY", "bob", []string{"-X", "COPY", "-H", dest("/d/data/copy.txt"), e.url + "/d/data/keep.txt"}, 403},
		{"bob DELETE", "bob", []string{"-X", "DELETE", e.url + "/d/data/keep.txt"}, 403},
		{"bob DELETE dir", "bob", []string{"-X", "DELETE", e.url + "/d/data/dir"}, 403},
		{"bob PROPPATCH", "bob", []string{"-X", "PROPPATCH", "--data-binary", "@" + proppatch, e.url + "/d/data/keep.txt"}, 403},
		{"bob LOCK unmapped", "bob", []string{"-X", "LOCK", "--data-binary", "@" + lock, e.url + "/d/data/locked.txt"}, 403},
		{"nobody PROPFIND", "", []string{"-X", "PROPFIND", e.url + "/d/data/"}, 401},
		{"PROPFIND Depth infinity", "alice", []string{"-X", "PROPFIND", "-H", "Depth: infinity", e.url + "/d/"}, 403},
		{"MOVE to %2e%2e", "alice", []string{"-X", "MOVE", "-H", dest("/d/data/%2e%2e/x"), e.url + "/d/data/keep.txt"}, 400},
		{"COPY to ..%5c", "alice", []string{"-X", "COPY", "-H", dest("/d/data/..%5cx"), e.url + "/d/data/keep.txt"}, 400},
		{"COPY to ..", "alice", []string{"-X", "COPY", "-H", dest("/d/data/../x"), e.url + "/d/data/keep.txt"}, 400},
		{"MKCOL %2e%2e", "alice", []string{"-X", "MKCOL", e.url + "/d/data/%2e%2e/x"}, 400},
		{"If with another ETag", "alice", []string{"-T", body, "-H", `If: (["0-0"])`, e.url + "/d/data/keep.txt"}, 412},
		{"PROPFIND nested 200 deep", "alice", []string{"-X", "PROPFIND", "-H", "Depth: 1", "--data-binary", "@" + deep, e.url + "/d/data/"}, 400},
		{"PROPFIND of 120,000 tokens", "alice", []string{"-X", "PROPFIND", "-H", "Depth: 1", "--data-binary", "@" + big, e.url + "/d/data/"}, 413},
		{"PROPFIND with entities", "alice", []string{"-X", "PROPFIND", "-H", "Depth: 1", "--data-binary", "@" + laughs, e.url + "/d/data/"}, 400},
		{"PROPFIND malformed", "alice", []string{"-X", "PROPFIND", "-H", "Depth: 1", "--data-binary", "@" + malformed, e.url + "/d/data/"}, 400},
		// What the front end does not serve is refused, never served as
		// the plain request it resembles.
		{"PUT of a range", "alice", []string{"-T", body, "-H", "Content-Range: bytes 0-6/100", e.url + "/d/data/keep.txt"}, 501},
		{"PUT with a query", "alice", []string{"-T", body, e.url + "/d/data/keep.txt?append=1"}, 501},
		{"PUT If-None-Match: * over a file", "alice", []string{"-T", body, "-H", "If-None-Match: *", e.url + "/d/data/keep.txt"}, 412},
		{"PUT If-Match of another version", "alice", []string{"-T", body, "-H", `If-Match: "0-0"`, e.url + "/d/data/keep.txt"}, 412},
		{"MOVE If-Match of another version", "alice", []string{"-X", "MOVE", "-H", dest("/d/data/moved.txt"), "-H", `If-Match: "0-0"`, e.url + "/d/data/keep.txt"}, 412},
		{"DELETE If-Match of another version", "alice", []string{"-X", "DELETE", "-H", `If-Match: "0-0"`, e.url + "/d/data/keep.txt"}, 412},
		{"POST (served by the library as a GET)", "alice", []string{"-X", "POST", "--data-binary", "@" + body, e.url + "/d/data/keep.txt"}, 405},
		{"an unknown method", "alice", []string{"-X", "SEARCH", e.url + "/d/data/"}, 501},
		{"PROPFIND with a query", "alice", []string{"-X", "PROPFIND", "-H", "Depth: 1", e.url + "/d/data/?x=1"}, 501},
	} {
		code, msg, _ := e.curl(t, c.user, c.args...)
		if code != c.want {
			t.Errorf("%s: %d (%s), want %d", c.name, code, strings.TrimSpace(msg), c.want)
		}
	}
	sameTree(t, "the share", before, testenv.Tree(t, e.root))
	sameTree(t, "beside the share", beforeOut, exports(testenv.Tree(t, outside)))
	code, msg, _ := e.curl(t, "alice", "-X", "PROPFIND", "-H", "Depth: 1", e.url+"/d/data/")
	if code != 207 || !strings.Contains(msg, "/d/data/keep.txt") {
		t.Errorf("PROPFIND after the refusals: %d %s", code, msg)
	}
	// What alice makes is not writable by all.
	e.curl(t, "alice", "-T", body, e.url+"/d/data/made.txt")
	e.curl(t, "alice", "-X", "MKCOL", e.url+"/d/data/madedir")
	for name, want := range map[string]os.FileMode{"made.txt": 0o644, "madedir": 0o755} {
		if fi, err := os.Stat(filepath.Join(e.root, name)); err != nil {
			t.Errorf("%s made through WebDAV: %v", name, err)
		} else if fi.Mode().Perm() != want {
			t.Errorf("%s made through WebDAV has mode %o, want %o", name, fi.Mode().Perm(), want)
		}
	}
}

// TestWebDAVGridLock: a WebDAV lock of a file is a lock at the share: a
// second gateway (another agent) cannot lock the file while it is held,
// and can once it is unlocked; a lock held at the share makes LOCK fail
// with 423.
func TestWebDAVGridLock(t *testing.T) {
	needTool(t, "curl")
	e := newEnv(t, true)
	os.WriteFile(filepath.Join(e.root, "doc.txt"), []byte("doc"), 0o644)
	lock := filepath.Join(e.dir, "lock.xml")
	os.WriteFile(lock, []byte(`<?xml version="1.0"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype><D:owner>alice</D:owner></D:lockinfo>`), 0o644)

	// Another agent: a second gateway with its own cache, for alice.
	cons, _ := consistency.Parse("window=1s")
	other, err := New(Config{Client: e.gwCfg, Cache: cache.Options{Dir: filepath.Join(e.dir, "other"), MemoryBytes: 16 << 20, DiskBytes: 1 << 30},
		VFS: vfs.Options{Consistency: cons}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := context.Background()
	ov, err := other.Acquire(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release("alice")
	tryLock := func() error {
		h, err := ov.Open(ctx, "/d/data/doc.txt", syscall.O_RDWR)
		if err != nil {
			return err
		}
		defer h.Release(ctx)
		return h.Lock(ctx, vfs.LockRange{Type: wire.LockWrite}, false, nil, true)
	}

	code, _, hdr := e.curl(t, "alice", "-X", "LOCK", "-H", "Timeout: Second-60", "--data-binary", "@"+lock, e.url+"/d/data/doc.txt")
	token := regexp.MustCompile(`(?i)lock-token: (<[^>]+>)`).FindStringSubmatch(hdr)
	if code != 200 || token == nil {
		t.Fatalf("LOCK: %d\n%s", code, hdr)
	}
	if err := tryLock(); wire.CodeOf(err) != wire.CodeLocked {
		t.Errorf("another agent's lock while the WebDAV lock is held: %v, want it refused as locked", err)
	}
	if code, _, _ = e.curl(t, "alice", "-X", "UNLOCK", "-H", "Lock-Token: "+token[1], e.url+"/d/data/doc.txt"); code != 204 {
		t.Fatalf("UNLOCK: %d", code)
	}
	if err := tryLock(); err != nil {
		t.Errorf("another agent's lock after UNLOCK: %v", err)
	}

	// The other way: a lock held at the share.
	h, err := ov.Open(ctx, "/d/data/doc.txt", syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Lock(ctx, vfs.LockRange{Type: wire.LockWrite}, false, nil, true); err != nil {
		t.Fatal(err)
	}
	if code, _, _ = e.curl(t, "alice", "-X", "LOCK", "--data-binary", "@"+lock, e.url+"/d/data/doc.txt"); code != 423 {
		t.Errorf("LOCK of a file locked at the share: %d, want 423", code)
	}
	h.Release(ctx)
	if code, _, _ = e.curl(t, "alice", "-X", "LOCK", "--data-binary", "@"+lock, e.url+"/d/data/doc.txt"); code != 200 {
		t.Errorf("LOCK once the share's lock is gone: %d, want 200", code)
	}
}

// TestWebDAVCadaver: cadaver, a WebDAV client nobody here wrote, signs in
// from ~/.netrc, makes a collection, puts, lists, moves, gets and
// deletes; bob's put is refused. (cadaver takes no CA certificate to
// trust but the system's, so it talks to a clear-text front end on
// loopback, as --insecure serves; TLS is litmus's and curl's part.)
func TestWebDAVCadaver(t *testing.T) {
	needTool(t, "cadaver")
	e := newEnv(t, true)
	url := e.serveClear(t, true)
	local := filepath.Join(e.dir, "local.txt")
	os.WriteFile(local, []byte("through cadaver\n"), 0o644)
	run := func(user, script string) string {
		t.Helper()
		home := filepath.Join(e.dir, "home-"+user)
		os.MkdirAll(home, 0o700)
		os.WriteFile(filepath.Join(home, ".netrc"), []byte("machine 127.0.0.1 login "+user+" password "+user+"-secret-pw\n"), 0o600)
		cmd := exec.Command("cadaver", url+"/d/data/")
		cmd.Dir, cmd.Env = e.dir, append(os.Environ(), "HOME="+home)
		cmd.Stdin = strings.NewReader(script + "quit\n")
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	out := run("alice", "mkcol col\nput local.txt col/a.txt\nls col\nmove col/a.txt col/b.txt\nget col/b.txt got.txt\n")
	if b, _ := os.ReadFile(filepath.Join(e.root, "col", "b.txt")); string(b) != "through cadaver\n" {
		t.Errorf("after cadaver's put and move the share holds %q\n%s", b, out)
	}
	if b, _ := os.ReadFile(filepath.Join(e.dir, "got.txt")); string(b) != "through cadaver\n" {
		t.Errorf("cadaver got %q\n%s", b, out)
	}
	if !strings.Contains(out, "a.txt") {
		t.Errorf("cadaver's ls does not show a.txt:\n%s", out)
	}
	before := testenv.Tree(t, e.root)
	out = run("bob", "put local.txt col/bob.txt\ndelete col/b.txt\n")
	if !strings.Contains(out, "403") {
		t.Errorf("bob's put and delete through cadaver:\n%s", out)
	}
	sameTree(t, "the share after bob's cadaver", before, testenv.Tree(t, e.root))
	run("alice", "delete col/b.txt\nrmcol col\n")
	if _, err := os.Stat(filepath.Join(e.root, "col")); err == nil {
		t.Error("cadaver's rmcol left the collection")
	}
}

// TestWebDAVDavfs2: davfs2 mounts the WebDAV gateway (the kernel's file
// system calls through a WebDAV client nobody here wrote): alice writes,
// lists and reads there; the share has her file. Root only (mount).
func TestWebDAVDavfs2(t *testing.T) {
	needTool(t, "mount.davfs")
	if os.Geteuid() != 0 {
		t.Skip("mounting davfs needs root")
	}
	e := newEnv(t, true)
	os.WriteFile(filepath.Join(e.root, "there.txt"), []byte("at the share\n"), 0o644)
	d := filepath.Join(e.dir, "davfs")
	mnt := filepath.Join(d, "mnt")
	os.MkdirAll(filepath.Join(d, "cache"), 0o700)
	os.Chmod(filepath.Join(d, "cache"), 0o777) // (a temporary directory of the test)
	os.MkdirAll(mnt, 0o755)
	// mount.davfs reads the certificate as its own unprivileged user.
	for _, dir := range []string{filepath.Dir(e.dir), e.dir, d} {
		os.Chmod(dir, 0o755)
	}
	os.WriteFile(filepath.Join(d, "secrets"), []byte(e.url+"/d/data/ alice alice-secret-pw\n"), 0o600)
	os.WriteFile(filepath.Join(d, "davfs2.conf"), []byte("secrets "+filepath.Join(d, "secrets")+"\ntrust_server_cert "+e.cacert+
		"\ncache_dir "+filepath.Join(d, "cache")+"\nuse_locks 1\ndelay_upload 0\n"), 0o600)
	out, err := exec.Command("mount", "-t", "davfs", "-o", "conf="+filepath.Join(d, "davfs2.conf"), e.url+"/d/data/", mnt).CombinedOutput()
	if err != nil {
		t.Fatalf("mount -t davfs: %v\n%s", err, out)
	}
	defer func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v %s", err, out)
		}
	}()
	if b, err := os.ReadFile(filepath.Join(mnt, "there.txt")); err != nil || string(b) != "at the share\n" {
		t.Errorf("reading through davfs2: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "from-davfs.txt"), []byte("written through davfs2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(mnt)
	if err != nil || len(ents) < 2 {
		t.Errorf("listing through davfs2: %v %v", ents, err)
	}
	// davfs2 uploads on close (delay_upload 0); the share has it soon.
	var b []byte
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if b, _ = os.ReadFile(filepath.Join(e.root, "from-davfs.txt")); string(b) == "written through davfs2\n" {
			break
		}
	}
	if string(b) != "written through davfs2\n" {
		t.Errorf("the share holds %q of davfs2's file", b)
	}
}
