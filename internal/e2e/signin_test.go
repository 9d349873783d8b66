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
	url, curl := serveHTTP(t, d)

	tokA := strings.TrimSpace(d.pando(alice, "token", "create").ok().stdout)
	tokB := strings.TrimSpace(d.pando(bob, "token", "create", "--ttl", "1h").ok().stdout)
	tokShort := strings.TrimSpace(d.pando(alice, "token", "create", "--ttl", "2s").ok().stdout)
	d.pando(alice, "token", "create", "--ttl", "1ms").fails(1, "1s to 720h")
	d.pando(filepath.Join(d.dir, "web.json"), "token", "create").fails(4, "not a user")

	src := filepath.Join(d.dir, "src.txt")
	os.WriteFile(src, []byte("signed in\n"), 0o644)
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

// serveHTTP starts an HTTP gateway of domain d (a gateway user "web"
// added), and returns its URL and a curl that sends a bearer token to it
// and returns the body and the status.
func serveHTTP(t *testing.T, d *domain) (string, func(tok string, args ...string) string) {
	t.Helper()
	web := filepath.Join(d.dir, "web.json")
	d.pando(d.admin, "user", "add", "web", "--gateway", "-o", web).ok()
	_, m := start(t, `at (https://\S+)/ \(its certificate: (\S+)\)`, nil, "--config", web, "serve", "http",
		"--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "gwcache"))
	cacert := m[2]
	return m[1], func(tok string, args ...string) string {
		out, _ := exec.Command("curl", append([]string{"-sS", "--cacert", cacert, "-H", "Authorization: Bearer " + tok, "-w", "%{http_code}"}, args...)...).Output()
		return string(out)
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

// TestScopedTokens: pando token create --scope prints a JWT of the
// domain's own that a gateway takes as "Authorization: Bearer", with the
// rights its scopes cover and the user's ACLs grant; another domain
// trusts the first one's keys (pando domain jwks, pando domain
// trust-issuer) and takes a token made for its audience, as alice@st,
// below the base it gave; a token for another audience is refused
// saying which it has and which is wanted; nothing is written by a
// refused request.
func TestScopedTokens(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed (./dev test installs it)")
	}
	st := newDomain(t, "st")
	stRoot := st.addShare("data")
	alice := st.addUser("alice")
	st.pando(st.admin, "acl", "set", "/st/data", "alice", "rlidwk").ok()
	os.MkdirAll(filepath.Join(stRoot, "pub"), 0o755)
	os.MkdirAll(filepath.Join(stRoot, "in"), 0o755)
	os.WriteFile(filepath.Join(stRoot, "pub", "a.txt"), []byte("st pub\n"), 0o644)

	tok := strings.TrimSpace(st.pando(alice, "token", "create", "--scope", "storage.read:/st/data/pub", "--scope", "storage.modify:/st/data/in").ok().stdout)
	st.pando(alice, "token", "create", "--audience", "x").fails(1, "give --scope too")
	st.pando(alice, "token", "create", "--scope", "storage.read").fails(1, "has no path")
	sign := strings.TrimSpace(st.pando(alice, "token", "create").ok().stdout)
	if !strings.HasPrefix(sign, "pando-signin.") || strings.Count(tok, ".") != 2 {
		t.Fatalf("sign-in token %q, JWT %q", sign, tok)
	}

	stURL, stCurl := serveHTTP(t, st)
	src := filepath.Join(st.dir, "src.txt")
	os.WriteFile(src, []byte("scoped\n"), 0o644)
	if out := stCurl(tok, stURL+"/st/data/pub/a.txt"); out != "st pub\n200" {
		t.Errorf("GET with alice's JWT: %q", out)
	}
	if out := stCurl(tok, "-o", "/dev/null", "-T", src, stURL+"/st/data/in/b.txt"); out != "201" {
		t.Errorf("PUT with alice's JWT below in: %q", out)
	}
	if out := stCurl(tok, "-T", src, stURL+"/st/data/pub/c.txt"); !strings.HasSuffix(out, "403") || !strings.Contains(out, "alice@st lacks the insert right") {
		t.Errorf("PUT with alice's JWT below pub (read only): %q", out)
	}

	// Domain uva trusts st's keys for its own audience, below /uva/data.
	uva := newDomain(t, "uva")
	uvaRoot := uva.addShare("data")
	os.MkdirAll(filepath.Join(uvaRoot, "shared"), 0o755)
	os.WriteFile(filepath.Join(uvaRoot, "shared", "x.txt"), []byte("uva shared\n"), 0o644)
	os.WriteFile(filepath.Join(uvaRoot, "private.txt"), []byte("uva private\n"), 0o644)
	jwks := filepath.Join(uva.dir, "st.jwks")
	r := st.pando(alice, "domain", "jwks").ok()
	os.WriteFile(jwks, []byte(r.stdout), 0o644)
	if !strings.Contains(r.stderr, "issuer pando://st") {
		t.Errorf("pando domain jwks said %q", r.stderr)
	}
	uva.pando(uva.admin, "domain", "trust-issuer", "pando://st", "--jwks", jwks, "--audience", "https://uva.example.org", "--base", "/uva/data").ok()
	uva.pando(uva.admin, "domain", "trust-issuer", "https://evil", "--jwks", jwks, "--audience", "a", "--base", "/etc").fails(1, "/etc")
	if out := uva.pando(uva.admin, "domain", "issuers").ok().stdout; !strings.Contains(out, "st ") || !strings.Contains(out, "pando://st") || !strings.Contains(out, "/uva/data") {
		t.Errorf("pando domain issuers: %q", out)
	}
	forUva := strings.TrimSpace(st.pando(alice, "token", "create", "--scope", "storage.read:/shared", "--audience", "https://uva.example.org").ok().stdout)
	uvaURL, uvaCurl := serveHTTP(t, uva)
	if out := uvaCurl(forUva, uvaURL+"/uva/data/shared/x.txt"); out != "uva shared\n200" {
		t.Errorf("GET at uva with st's JWT: %q", out)
	}
	if out := uvaCurl(forUva, uvaURL+"/uva/data/private.txt"); !strings.HasSuffix(out, "403") || !strings.Contains(out, "alice@st lacks") {
		t.Errorf("GET at uva outside the JWT's scope: %q", out)
	}
	if out := uvaCurl(tok, uvaURL+"/uva/data/shared/x.txt"); !strings.HasSuffix(out, "401") ||
		!strings.Contains(out, `the token's audience is "pando://st", but this domain wants "https://uva.example.org"`) {
		t.Errorf("st's own JWT at uva: %q", out)
	}
	before, _ := os.ReadDir(uvaRoot)
	if out := uvaCurl(forUva, "-T", src, uvaURL+"/uva/data/shared/new.txt"); !strings.HasSuffix(out, "403") {
		t.Errorf("PUT at uva with a read-only JWT: %q", out)
	}
	uva.pando(uva.admin, "domain", "distrust-issuer", "st").ok()
	time.Sleep(10 * time.Second) // the gateway trusts a checked JWT that long
	if out := uvaCurl(forUva, uvaURL+"/uva/data/shared/x.txt"); !strings.HasSuffix(out, "401") || !strings.Contains(out, "not trusted") {
		t.Errorf("a distrusted issuer's JWT: %q", out)
	}
	after, _ := os.ReadDir(uvaRoot)
	if len(before) != len(after) {
		t.Errorf("the share at uva changed: %v -> %v", before, after)
	}
	if _, err := os.Stat(filepath.Join(uvaRoot, "shared", "new.txt")); err == nil {
		t.Error("a refused PUT wrote new.txt")
	}
}
