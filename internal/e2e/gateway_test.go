package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"pando.dev/pando/internal/config"
)

// TestGatewayServe: pando serve http, run with a gateway's credentials
// (pando user add --gateway) and a password file (pando serve passwd),
// takes a PUT and serves a GET from curl with alice's rights; it refuses
// to start with a user's credentials or in clear text off loopback.
func TestGatewayServe(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed (./dev test installs it)")
	}
	d := newDomain(t, "d")
	root := d.addShare("data")
	alice := d.addUser("alice")
	d.addUser("bob")
	d.pando(d.admin, "acl", "set", "/d/data", "alice", "rlidwk", "bob", "rl").ok()
	web := filepath.Join(d.dir, "web.json")
	if out := d.pando(d.admin, "user", "add", "web", "--gateway", "-o", web).ok().stdout; !strings.Contains(out, "gateway:web@d") {
		t.Errorf("pando user add --gateway: %q", out)
	}
	pw := filepath.Join(d.dir, "passwd")
	runPando(t, "alice-password\n", web, "serve", "passwd", "--passwords", pw, "alice").ok()
	runPando(t, "bob-password\n", web, "serve", "passwd", "--passwords", pw, "bob").ok()
	runPando(t, "short\n", web, "serve", "passwd", "--passwords", pw, "bob").fails(1, "shorter than 8")

	d.pando(alice, "serve", "http", "--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "c0")).fails(1, "alice@d", "--gateway")
	d.pando(web, "serve", "http", "--insecure", "--listen", "0.0.0.0:0", "--cache-dir", filepath.Join(d.dir, "c0")).fails(2, "loopback")

	_, m := start(t, `at (https://\S+)/ \(its certificate: (\S+)\)`, nil, "--config", web, "serve", "http",
		"--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "gwcache"), "--passwords", pw)
	url, cacert := m[1], m[2]
	src := filepath.Join(d.dir, "src.txt")
	os.WriteFile(src, []byte("through the gateway\n"), 0o644)
	curl := func(user string, args ...string) string {
		out, _ := exec.Command("curl", append([]string{"-sS", "--cacert", cacert, "-u", user, "-w", "%{http_code}"}, args...)...).Output()
		return string(out)
	}
	if out := curl("alice:alice-password", "-o", "/dev/null", "-T", src, url+"/d/data/g.txt"); out != "201" {
		t.Fatalf("PUT as alice: %s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "g.txt")); string(b) != "through the gateway\n" {
		t.Errorf("the share holds %q", b)
	}
	if out := curl("bob:bob-password", url+"/d/data/g.txt"); out != "through the gateway\n200" {
		t.Errorf("GET as bob: %q", out)
	}
	if out := curl("bob:bob-password", "-o", "/dev/null", "-T", src, url+"/d/data/b.txt"); out != "403" {
		t.Errorf("PUT as bob, who may not write: %s", out)
	}
	if _, err := os.Stat(filepath.Join(root, "b.txt")); err == nil {
		t.Error("bob's refused PUT left a file at the share")
	}
	if d.pando(alice, "cat", "/d/data/g.txt").ok().stdout != "through the gateway\n" {
		t.Error("the CLI does not read what the gateway wrote")
	}

	_, m = start(t, `at (https://\S+)/ \(its certificate: (\S+)\)`, nil, "--config", web, "serve", "webdav",
		"--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "davcache"), "--passwords", pw)
	url, cacert = m[1], m[2]
	if out := curl("alice:alice-password", "-o", "/dev/null", "-X", "MKCOL", url+"/d/data/col"); out != "201" {
		t.Errorf("MKCOL as alice: %s", out)
	}
	if out := curl("bob:bob-password", "-X", "PROPFIND", "-H", "Depth: 1", url+"/d/data/"); !strings.HasSuffix(out, "207") || !strings.Contains(out, "/d/data/col/") {
		t.Errorf("PROPFIND as bob: %s", out)
	}
	if fi, err := os.Stat(filepath.Join(root, "col")); err != nil || !fi.IsDir() {
		t.Errorf("MKCOL made no directory at the share: %v", err)
	}

	keys := filepath.Join(d.dir, "s3keys")
	d.pando(web, "serve", "s3", "--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "c0")).fails(2, "--keys")
	out := runPando(t, "", web, "serve", "s3-key", "--keys", keys, "bob").ok().stdout
	access, secret := between(out, "access key ", " for"), between(out, "secret key ", "\n")
	_, m = start(t, `at (https://\S+)/ \(its certificate: (\S+)\)`, nil, "--config", web, "serve", "s3",
		"--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "s3cache"), "--keys", keys)
	url, cacert = m[1], m[2]
	got, _ := exec.Command("curl", "-sS", "--cacert", cacert, "--aws-sigv4", "aws:amz:us-east-1:s3", "-u", access+":"+secret,
		"-w", "%{http_code}", url+"/data/g.txt").Output()
	if string(got) != "through the gateway\n200" {
		t.Errorf("S3 GET as bob with curl --aws-sigv4: %q", got)
	}
}

func between(s, a, b string) string {
	_, rest, ok := strings.Cut(s, a)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, b)
	return v
}

// TestUpServe: pando up --serve webdav=ADDR makes its gateway's
// credentials and serves the administrator, signed in with the
// certificate of the administrator's bundle.
func TestUpServe(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed (./dev test installs it)")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	os.Mkdir(data, 0o755)
	state := filepath.Join(dir, "state")
	_, m := start(t, `webdav gateway at (https://\S+)/ \(its certificate: (\S+)\)`, nil, "up", "--state", state, "--share", data,
		"--listen", "127.0.0.1:0", "--no-config", "--serve", "webdav=127.0.0.1:0")
	url, cacert := m[1], m[2]
	cfg, err := config.Load(filepath.Join(state, "controller", "admin.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "a.crt"), []byte(cfg.Cert), 0o600)
	os.WriteFile(filepath.Join(dir, "a.key"), []byte(cfg.Key), 0o600)
	src := filepath.Join(dir, "src")
	os.WriteFile(src, []byte("up and served\n"), 0o644)
	out, err := exec.Command("curl", "-sS", "--cacert", cacert, "--cert", filepath.Join(dir, "a.crt"), "--key", filepath.Join(dir, "a.key"),
		"-o", "/dev/null", "-w", "%{http_code}", "-T", src, url+"/local/data/u.txt").Output()
	if string(out) != "201" {
		t.Fatalf("PUT as the administrator: %q %v", out, err)
	}
	if b, _ := os.ReadFile(filepath.Join(data, "u.txt")); string(b) != "up and served\n" {
		t.Errorf("the share holds %q", b)
	}
	if _, err := os.Stat(filepath.Join(state, "gateway.json")); err != nil {
		t.Errorf("the gateway's credentials were not kept: %v", err)
	}
}
