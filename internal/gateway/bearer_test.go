package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/wire"
)

// userClient is a client of user name of the env (alice, bob, or one
// added later with its files in e.users).
func (e *env) userClient(t *testing.T, name string) *client.Client {
	t.Helper()
	cfg := *e.gwCfg
	cert, _ := os.ReadFile(e.users[name][0])
	key, _ := os.ReadFile(e.users[name][1])
	cfg.User, cfg.Cert, cfg.Key = name, string(cert), string(key)
	return e.d.Client(&cfg)
}

// seedTree makes files (name: content) and directories (name ending
// in /) below root.
func seedTree(root string, files map[string]string) {
	for name, content := range files {
		p := filepath.Join(root, name)
		if strings.HasSuffix(name, "/") {
			os.MkdirAll(p, 0o755)
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(content), 0o644)
	}
}

// jwt is a JWT of the domain's own for user, with scopes.
func (e *env) jwt(t *testing.T, user string, scopes ...string) string {
	t.Helper()
	r, err := e.userClient(t, user).Admin().JWTCreate(context.Background(), scopes, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	return r.JWT
}

// TestBearerJWT: curl with "Authorization: Bearer JWT" reads and writes
// what the token's scopes cover and the user's ACLs grant; a trusted
// issuer's token reads what its scopes cover below the issuer's base;
// each refused token or request is answered with one sentence and
// leaves the share as it was, and the gateway serves everyone else.
func TestBearerJWT(t *testing.T) {
	needTool(t, "curl")
	e := newEnv(t, false)
	ctx := context.Background()
	seedTree(e.root, map[string]string{"pub/a.txt": "public", "in/": "", "secret.txt": "secret"})
	bearer := func(tok string, args ...string) (int, string) {
		t.Helper()
		code, body, _ := e.curl(t, "bearer:"+tok, args...)
		return code, body
	}
	jwtOf := func(user string, scopes ...string) string { return e.jwt(t, user, scopes...) }

	// alice (rlidwk): read below pub, modify below in.
	alice := jwtOf("alice", "storage.read:/d/data/pub", "storage.modify:/d/data/in")
	if code, body := bearer(alice, e.url+"/d/data/pub/a.txt"); code != 200 || body != "public" {
		t.Fatalf("GET with alice's JWT: %d %q", code, body)
	}
	src := filepath.Join(e.dir, "up")
	os.WriteFile(src, []byte("uploaded"), 0o644)
	if code, body := bearer(alice, "-T", src, e.url+"/d/data/in/up.txt"); code != 201 {
		t.Fatalf("PUT with alice's JWT: %d %s", code, body)
	}
	if b, _ := os.ReadFile(filepath.Join(e.root, "in", "up.txt")); string(b) != "uploaded" {
		t.Fatalf("the share holds %q", b)
	}

	// A trusted issuer, its tokens read below /d/data/pub only.
	admin := e.d.Client(e.d.Admin)
	key, _ := auth.NewJWTKey()
	jwks, _ := auth.JWKSOf(key)
	const iss, aud = "https://idp.example.org", "https://d.example.org"
	if err := admin.Admin().IssuerTrust(ctx, wire.IssuerInfo{Name: "idp", Issuer: iss, Audience: aud, Base: "/d/data", JWKS: jwks}); err != nil {
		t.Fatal(err)
	}
	sign := func(k *auth.JWTClaims, change func(*auth.JWTClaims)) string {
		t.Helper()
		if change != nil {
			change(k)
		}
		s, err := auth.SignJWT(key, k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	claims := func() *auth.JWTClaims {
		now := time.Now()
		return &auth.JWTClaims{Issuer: iss, Subject: "u123", Audience: jwt.Audience{aud}, Expiry: jwt.NewNumericDate(now.Add(time.Hour)),
			IssuedAt: jwt.NewNumericDate(now), Scope: "storage.read:/pub", Version: "1.0"}
	}
	if code, body := bearer(sign(claims(), nil), e.url+"/d/data/pub/a.txt"); code != 200 || body != "public" {
		t.Fatalf("GET with the issuer's JWT: %d %q", code, body)
	}

	// Its create scope makes new files (owned by u123@idp at the share),
	// and changes none.
	create := sign(claims(), func(c *auth.JWTClaims) { c.Scope = "storage.create:/in" })
	if code, body := bearer(create, "-T", src, e.url+"/d/data/in/idp.txt"); code != 201 {
		t.Fatalf("PUT of a new file with the issuer's create scope: %d %s", code, body)
	}
	if b, _ := os.ReadFile(filepath.Join(e.root, "in", "idp.txt")); string(b) != "uploaded" {
		t.Fatalf("the share holds %q", b)
	}
	if code, body := bearer(create, "-T", src, e.url+"/d/data/in/idp.txt"); code != 403 || !strings.Contains(body, "u123@idp lacks the write right") {
		t.Errorf("PUT over a file with the create scope alone: %d %s", code, body)
	}

	// carol, revoked after her token was made.
	r, err := admin.Admin().UserAdd(ctx, "carol", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.users["carol"] = [2]string{filepath.Join(e.dir, "carol.crt"), filepath.Join(e.dir, "carol.key")}
	os.WriteFile(e.users["carol"][0], r.Cert, 0o600)
	os.WriteFile(e.users["carol"][1], r.Key, 0o600)
	carol := jwtOf("carol", "storage.read:/d/data")
	if err := admin.Admin().UserRevoke(ctx, "carol"); err != nil {
		t.Fatal(err)
	}
	// bob's ACL says rl: a modify scope gives him no write.
	bob := jwtOf("bob", "storage.modify:/d/data", "storage.read:/d/data")
	other, _ := auth.NewJWTKey()
	unknownKey, err := auth.SignJWT(other, claims())
	if err != nil {
		t.Fatal(err)
	}
	good := strings.Split(sign(claims(), nil), ".")
	good[1] = strings.Split(sign(claims(), func(c *auth.JWTClaims) { c.Scope = "storage.modify:/" }), ".")[1]
	forged := strings.Join(good, ".")

	before := testenv.Tree(t, e.root)
	for _, c := range []struct {
		name string
		tok  string
		args []string
		code int
		says string
	}{
		{"forged", forged, []string{"-T", src, e.url + "/d/data/evil.txt"}, 401, "signature does not verify"},
		{"expired", sign(claims(), func(c *auth.JWTClaims) { c.Expiry = jwt.NewNumericDate(time.Now().Add(-time.Minute)) }), []string{e.url + "/d/data/pub/a.txt"}, 401, "the token expired at"},
		{"wrong-audience", sign(claims(), func(c *auth.JWTClaims) { c.Audience = jwt.Audience{"https://other.example.org"} }), []string{e.url + "/d/data/pub/a.txt"}, 401,
			`the token's audience is "https://other.example.org", but this domain wants "https://d.example.org"`},
		{"wrong-issuer", sign(claims(), func(c *auth.JWTClaims) { c.Issuer = "https://evil.example.org" }), []string{e.url + "/d/data/pub/a.txt"}, 401, `its issuer "https://evil.example.org" is not trusted by domain d`},
		{"unknown-key", unknownKey, []string{e.url + "/d/data/pub/a.txt"}, 401, "is none of issuer https://idp.example.org's keys"},
		{"revoked-subject", carol, []string{e.url + "/d/data/pub/a.txt"}, 401, "the credentials of carol@d have been revoked"},
		{"scope-read-elsewhere", sign(claims(), nil), []string{e.url + "/d/data/secret.txt"}, 403,
			"u123@idp lacks the list right (l) on /d/data/secret.txt; domain d decided: its bearer token's scopes (storage.read:/d/data/pub) and the ACLs allow no more"},
		{"scope-write", alice, []string{"-T", src, e.url + "/d/data/pub/a.txt"}, 403, "alice@d lacks the write right"},
		{"scope-outside", alice, []string{"-X", "DELETE", e.url + "/d/data/secret.txt"}, 403, "alice@d lacks"},
		{"acl-and-scope", bob, []string{"-T", src, e.url + "/d/data/in/bob.txt"}, 403, "bob@d lacks the insert right"},
	} {
		code, body := bearer(c.tok, c.args...)
		if code != c.code || !strings.Contains(body, c.says) || strings.Count(strings.TrimSpace(body), "\n") > 0 {
			t.Errorf("%s: %d %q, want %d saying %q", c.name, code, body, c.code, c.says)
		}
	}
	sameTree(t, "the share after refused bearer tokens", before, testenv.Tree(t, e.root))
	// Everyone else is served still.
	if code, body, _ := e.curl(t, "alice", e.url+"/d/data/secret.txt"); code != 200 || body != "secret" {
		t.Errorf("alice with her certificate after the refusals: %d %q", code, body)
	}
	// A distrusted issuer's token gets no further share token.
	if err := admin.Admin().IssuerDistrust(ctx, "idp"); err != nil {
		t.Fatal(err)
	}
	if code, body := bearer(sign(claims(), func(c *auth.JWTClaims) { c.ID = "new" }), e.url+"/d/data/pub/a.txt"); code != 401 || !strings.Contains(body, "not trusted") {
		t.Errorf("a distrusted issuer's token: %d %q", code, body)
	}
}

// TestBearerWebDAV: a WebDAV front end takes JWTs too: it lists and
// reads what a read scope covers, and puts where a modify scope and a
// read scope cover (WebDAV's PUT opens the file for reading and
// writing), and not where the modify scope alone does.
func TestBearerWebDAV(t *testing.T) {
	needTool(t, "curl")
	e := newEnv(t, true)
	seedTree(e.root, map[string]string{"in/a.txt": "a", "up/": ""})
	who := "bearer:" + e.jwt(t, "alice", "storage.read:/d/data/in", "storage.modify:/d/data/in", "storage.modify:/d/data/up")
	if code, body, _ := e.curl(t, who, "-X", "PROPFIND", "-H", "Depth: 1", e.url+"/d/data/in/"); code != 207 || !strings.Contains(body, "a.txt") {
		t.Fatalf("PROPFIND with a read scope: %d %q", code, body)
	}
	src := filepath.Join(e.dir, "src")
	os.WriteFile(src, []byte("dav"), 0o644)
	if code, body, _ := e.curl(t, who, "-T", src, e.url+"/d/data/in/b.txt"); code != 201 {
		t.Fatalf("WebDAV PUT with read and modify scopes: %d %q", code, body)
	}
	before := testenv.Tree(t, e.root)
	if code, _, _ := e.curl(t, who, "-T", src, e.url+"/d/data/up/c.txt"); code != 403 {
		t.Errorf("WebDAV PUT with the modify scope alone: %d, want 403", code)
	}
	sameTree(t, "the share after a refused WebDAV PUT", before, testenv.Tree(t, e.root))
}
