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
