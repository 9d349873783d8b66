package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSignInTokens: pando token create gives a user a sign-in token that
// a gateway takes as "Authorization: Bearer": each person acts with their
// own rights through it; a token altered, expired, not a token at all,
// or of a revoked user is refused with 401 and nothing is written; a
// token's life is bounded.
func TestSignInTokens(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed (./dev test installs it)")
	}
	d := newDomain(t, "st")
	root := d.addShare("data")
	alice := d.addUser("alice")
	bob := d.addUser("bob")
	d.pando(d.admin, "acl", "set", "/st/data", "alice", "rlidwk", "bob", "rl").ok()
	web := filepath.Join(d.dir, "web.json")
	d.pando(d.admin, "user", "add", "web", "--gateway", "-o", web).ok()

	tokA := strings.TrimSpace(d.pando(alice, "token", "create").ok().stdout)
	tokB := strings.TrimSpace(d.pando(bob, "token", "create", "--ttl", "1h").ok().stdout)
	tokShort := strings.TrimSpace(d.pando(alice, "token", "create", "--ttl", "2s").ok().stdout)
	d.pando(alice, "token", "create", "--ttl", "1ms").fails(1, "1s to 720h")
	d.pando(web, "token", "create").fails(4, "not a user")

	_, m := start(t, `at (https://\S+)/ \(its certificate: (\S+)\)`, nil, "--config", web, "serve", "http",
		"--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "gwcache"))
	url, cacert := m[1], m[2]
	src := filepath.Join(d.dir, "src.txt")
	os.WriteFile(src, []byte("signed in\n"), 0o644)
	curl := func(tok string, args ...string) string {
		out, _ := exec.Command("curl", append([]string{"-sS", "--cacert", cacert, "-H", "Authorization: Bearer " + tok, "-w", "%{http_code}"}, args...)...).Output()
		return string(out)
	}
	if out := curl(tokA, "-o", "/dev/null", "-T", src, url+"/st/data/a.txt"); out != "201" {
		t.Fatalf("PUT with alice's token: %s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a.txt")); string(b) != "signed in\n" {
		t.Errorf("the share holds %q", b)
	}
	if out := curl(tokB, url+"/st/data/a.txt"); out != "signed in\n200" {
		t.Errorf("GET with bob's token: %q", out)
	}
	if out := curl(tokB, "-o", "/dev/null", "-T", src, url+"/st/data/b.txt"); out != "403" {
		t.Errorf("PUT with bob's token, who may not write: %s", out)
	}

	// Refused: nothing is written with any of them.
	mid := len(tokA) / 2
	flip := map[byte]byte{'A': 'B'}[tokA[mid]]
	if flip == 0 {
		flip = 'A'
	}
	altered := tokA[:mid] + string(flip) + tokA[mid+1:]
	time.Sleep(2500 * time.Millisecond) // tokShort is over
	for name, tok := range map[string]string{
		"altered": altered, "expired": tokShort, "not a token": "hello", "empty": "",
		"a share token's shape": "pando-signin.AAAA",
	} {
		if out := curl(tok, "-o", "/dev/null", "-T", src, url+"/st/data/"+strings.ReplaceAll(name, " ", "-")); out != "401" {
			t.Errorf("PUT with a token %s: %s, want 401", name, out)
		}
	}

	// Revoked: bob's token ends with him.
	d.pando(d.admin, "user", "revoke", "bob").ok()
	time.Sleep(time.Second)
	if out := curl(tokB, url+"/st/data/a.txt"); strings.HasSuffix(out, "200") {
		t.Errorf("GET with a revoked user's token: %q", out)
	}

	entries, _ := os.ReadDir(root)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "a.txt" {
		t.Errorf("the share holds %v after the refusals, want a.txt only", names)
	}
}

// TestControllerKeptCredentials: pando user passwd and pando user s3-key
// keep a user's gateway password (a slow hash) and S3 keys at the
// controller; gateways given no password or key file ask it. A user sets
// their own, an administrator anyone's, nobody else's (refused, nothing
// changed); a wrong password, an unknown key and a revoked user's are
// refused with nothing written.
func TestControllerKeptCredentials(t *testing.T) {
	for _, tool := range []string{"curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (./dev test installs it)", tool)
		}
	}
	d := newDomain(t, "kc")
	root := d.addShare("data")
	alice := d.addUser("alice")
	bob := d.addUser("bob")
	d.pando(d.admin, "acl", "set", "/kc/data", "alice", "rlidwk", "bob", "rl").ok()
	web := filepath.Join(d.dir, "web.json")
	d.pando(d.admin, "user", "add", "web", "--gateway", "-o", web).ok()

	runPando(t, "alice-password\n", alice, "user", "passwd").ok()
	runPando(t, "bob-password\n", d.admin, "user", "passwd", "bob").ok()
	runPando(t, "bob-chose-this\n", bob, "user", "passwd", "alice").fails(4, "administer")
	runPando(t, "short\n", alice, "user", "passwd").fails(1, "8 to 1024")
	runPando(t, "gateway-password\n", web, "user", "passwd").fails(4, "not a user")
	out := d.pando(bob, "user", "s3-key").ok().stdout
	access, secret := between(out, "access key ", " for"), between(out, "secret key ", "\n")
	if access == "" || secret == "" || !strings.Contains(out, " for bob\n") {
		t.Fatalf("pando user s3-key: %q", out)
	}
	d.pando(alice, "user", "s3-key", "bob").fails(4, "administer")

	_, m := start(t, `at (https://\S+)/ \(its certificate: (\S+)\)`, nil, "--config", web, "serve", "http",
		"--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "gwcache"))
	url, cacert := m[1], m[2]
	src := filepath.Join(d.dir, "src.txt")
	os.WriteFile(src, []byte("with a kept password\n"), 0o644)
	curl := func(user string, args ...string) string {
		out, _ := exec.Command("curl", append([]string{"-sS", "--cacert", cacert, "-u", user, "-w", "%{http_code}"}, args...)...).Output()
		return string(out)
	}
	if out := curl("alice:alice-password", "-o", "/dev/null", "-T", src, url+"/kc/data/a.txt"); out != "201" {
		t.Fatalf("PUT as alice with her password: %s", out)
	}
	for _, who := range []string{"alice:bob-chose-this", "alice:bob-password", "carol:alice-password", "web:alice-password"} {
		if out := curl(who, "-o", "/dev/null", "-T", src, url+"/kc/data/x.txt"); out != "401" {
			t.Errorf("PUT as %s: %s, want 401", who, out)
		}
	}
	if out := curl("bob:bob-password", url+"/kc/data/a.txt"); out != "with a kept password\n200" {
		t.Errorf("GET as bob with the password an administrator set: %q", out)
	}

	_, m = start(t, `at (https://\S+)/ \(its certificate: (\S+)\)`, nil, "--config", web, "serve", "s3",
		"--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "s3cache"))
	s3url, s3ca := m[1], m[2]
	s3get := func(key, sec, obj string) string {
		out, _ := exec.Command("curl", "-sS", "--cacert", s3ca, "--aws-sigv4", "aws:amz:us-east-1:s3", "-u", key+":"+sec,
			"-w", "%{http_code}", s3url+"/data/"+obj).Output()
		return string(out)
	}
	if out := s3get(access, secret, "a.txt"); out != "with a kept password\n200" {
		t.Errorf("S3 GET with bob's key: %q", out)
	}
	if out := s3get(access, secret+"x", "a.txt"); strings.HasSuffix(out, "200") {
		t.Errorf("S3 GET with a wrong secret: %q", out)
	}
	if out := s3get("PKNOSUCHKEY", secret, "a.txt"); strings.HasSuffix(out, "200") {
		t.Errorf("S3 GET with an unknown key: %q", out)
	}

	// Revoked: refused at once (the controller signs no token for bob,
	// whatever the gateway remembers of his sign-in). Added again:
	// nothing from before holds (a gateway that has not seen the old
	// password lately asks the controller, which has none for him).
	d.pando(d.admin, "user", "revoke", "bob").ok()
	time.Sleep(time.Second)
	if out := curl("bob:bob-password", url+"/kc/data/a.txt"); strings.HasSuffix(out, "200") {
		t.Errorf("GET as a revoked user: %q", out)
	}
	if out := s3get(access, secret, "a.txt"); strings.HasSuffix(out, "200") {
		t.Errorf("S3 GET with a revoked user's key: %q", out)
	}
	d.pando(d.admin, "user", "add", "bob", "-o", filepath.Join(d.dir, "bob-again.json")).ok()
	_, m = start(t, `at (https://\S+)/ \(its certificate: (\S+)\)`, nil, "--config", web, "serve", "http",
		"--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "gwcache2"))
	url, cacert = m[1], m[2]
	if out := curl("bob:bob-password", url+"/kc/data/a.txt"); !strings.HasSuffix(out, "401") {
		t.Errorf("GET with the password of bob from before his revocation: %q, want 401", out)
	}
	_, m = start(t, `at (https://\S+)/ \(its certificate: (\S+)\)`, nil, "--config", web, "serve", "s3",
		"--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "s3cache2"))
	s3url, s3ca = m[1], m[2]
	if out := s3get(access, secret, "a.txt"); strings.HasSuffix(out, "200") {
		t.Errorf("S3 GET with the key of bob from before his revocation: %q", out)
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 1 {
		t.Errorf("the share holds %d entries, want a.txt only", len(entries))
	}
}
