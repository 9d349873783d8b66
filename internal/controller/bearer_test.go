package controller

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

func gatewayConn() *rpc.ServerConn {
	return &rpc.ServerConn{State: &peer{id: auth.Identity{Domain: "fz", Role: auth.RoleGateway, Name: "gw"}}}
}

func call[T any](t *testing.T, c *Controller, sc *rpc.ServerConn, op wire.Op, msg any) (T, error) {
	t.Helper()
	var out T
	meta, err := wire.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Serve(context.Background(), &rpc.Request{Op: op, Meta: meta, Conn: sc})
	if err != nil {
		return out, err
	}
	if rep.Msg != nil {
		out = rep.Msg.(T)
	}
	return out, nil
}

// grantsOf resolves global path g with the JWT bearer as a gateway and
// returns the rights of the share token at each share-relative path.
func grantsOf(t *testing.T, c *Controller, bearer, g string) (map[string]auth.Rights, *auth.Token, error) {
	t.Helper()
	r, err := call[wire.ResolveResp](t, c, gatewayConn(), wire.OpResolve, wire.ResolveReq{Path: g, Bearer: bearer})
	if err != nil {
		return nil, nil, err
	}
	tok, err := auth.VerifyToken(c.keys.tokenPub, r.Token, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]auth.Rights{}
	for _, gr := range tok.Grants {
		m[gr.Path] = gr.Rights
	}
	return m, tok, nil
}

func ownJWT(t *testing.T, c *Controller, user string, scopes ...string) string {
	t.Helper()
	r, err := call[wire.TokenCreateResp](t, c, userConn(user), wire.OpTokenCreate, wire.TokenCreateReq{Scopes: scopes})
	if err != nil {
		t.Fatal(err)
	}
	if r.JWT == "" || r.Token != nil {
		t.Fatalf("token create with scopes answered %+v", r)
	}
	return r.JWT
}

// TestOwnJWT: a JWT of the domain's own gives at a share what its scopes
// cover and the user's ACLs grant, both; the gateway cannot widen it.
func TestOwnJWT(t *testing.T) {
	c := fuzzController(t)
	// alice may read and list in /fz/data (not read /fz/data/secret).
	tok := ownJWT(t, c, "alice", "storage.modify:/fz/data", "storage.read:/fz/data/pub")
	chk, err := call[wire.BearerCheckResp](t, c, gatewayConn(), wire.OpBearerCheck, wire.BearerCheckReq{Token: tok})
	if err != nil || chk.Principal != "alice@fz" || chk.User != "alice" || len(chk.Scopes) != 2 {
		t.Fatalf("bearer-check: %+v, %v", chk, err)
	}
	g, st, err := grantsOf(t, c, tok, "/fz/data/x")
	if err != nil {
		t.Fatal(err)
	}
	if st.Principal != "alice@fz" || st.Proxy != (auth.Identity{Domain: "fz", Role: auth.RoleGateway, Name: "gw"}).String() {
		t.Fatalf("share token for %s presented by %s", st.Principal, st.Proxy)
	}
	// modify (idwkl) AND rl = l at the mount; read (rl) AND rl below pub;
	// the negative read in secret still wins.
	for p, want := range map[string]auth.Rights{"exp": auth.List, "exp/pub": auth.Read | auth.List, "exp/secret": auth.List} {
		if g[p] != want {
			t.Errorf("rights at %s: %s, want %s (all: %v)", p, g[p], want, g)
		}
	}
	// A gateway presenting a user's JWT cannot also name another user.
	if _, err := call[wire.ResolveResp](t, c, gatewayConn(), wire.OpResolve, wire.ResolveReq{Path: "/fz/data", Bearer: tok, For: "admin"}); err == nil {
		t.Error("resolve with a bearer token and For was served")
	}
	// Nor may anyone but a gateway present one.
	if _, err := call[wire.ResolveResp](t, c, userConn("alice"), wire.OpResolve, wire.ResolveReq{Path: "/fz/data", Bearer: tok}); wire.CodeOf(err) != wire.CodeAccess {
		t.Errorf("a user presenting a bearer token: %v", err)
	}
	// The sign-in tokens of pando token create without --scope are as before.
	si, err := call[wire.TokenCreateResp](t, c, userConn("alice"), wire.OpTokenCreate, wire.TokenCreateReq{})
	if err != nil || si.Token == nil || si.JWT != "" {
		t.Fatalf("sign-in token: %+v %v", si, err)
	}
	if r, err := call[wire.TokenCheckResp](t, c, gatewayConn(), wire.OpTokenCheck, wire.TokenCheckReq{Token: si.Token}); err != nil || r.User != "alice" {
		t.Fatalf("sign-in token check: %+v %v", r, err)
	}
}

// testIssuer is an issuer of JWTs the tests trust as "idp".
type testIssuer struct {
	key *ecdsa.PrivateKey
	iss string
}

func trustIssuer(t *testing.T, c *Controller) *testIssuer {
	t.Helper()
	key, err := auth.NewJWTKey()
	if err != nil {
		t.Fatal(err)
	}
	jwks, _ := auth.JWKSOf(key)
	ti := &testIssuer{key: key, iss: "https://idp.example.org"}
	if _, err := call[wire.Empty](t, c, userConn("admin"), wire.OpIssuerTrust, wire.IssuerInfo{
		Name: "idp", Issuer: ti.iss, Audience: "https://fz.example.org", Base: "/fz/data", JWKS: jwks}); err != nil {
		t.Fatal(err)
	}
	return ti
}

func (ti *testIssuer) sign(t *testing.T, change func(*auth.JWTClaims)) string {
	t.Helper()
	now := time.Now()
	cl := &auth.JWTClaims{Issuer: ti.iss, Subject: "bob", Audience: jwt.Audience{"https://fz.example.org"},
		Expiry: jwt.NewNumericDate(now.Add(time.Hour)), IssuedAt: jwt.NewNumericDate(now), ID: "1",
		Scope: "storage.read:/pub storage.create:/in", Version: "1.0"}
	if change != nil {
		change(cl)
	}
	s, err := auth.SignJWT(ti.key, cl)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestIssuerJWT: a trusted issuer's token is a capability: its scopes
// below the issuer's base, for SUB@NAME, whatever the ACLs say.
func TestIssuerJWT(t *testing.T) {
	c := fuzzController(t)
	ti := trustIssuer(t, c)
	list, err := call[wire.IssuerListResp](t, c, userConn("admin"), wire.OpIssuerList, wire.Empty{})
	if err != nil || len(list.Issuers) != 1 || list.Issuers[0].Base != "/fz/data" {
		t.Fatalf("issuers: %+v %v", list, err)
	}
	g, st, err := grantsOf(t, c, ti.sign(t, nil), "/fz/data")
	if err != nil {
		t.Fatal(err)
	}
	if st.Principal != "bob@idp" {
		t.Errorf("principal %s, want bob@idp", st.Principal)
	}
	for p, want := range map[string]auth.Rights{"exp": 0, "exp/pub": auth.Read | auth.List, "exp/in": auth.Insert | auth.List, "exp/secret": 0} {
		if g[p] != want {
			t.Errorf("rights at %s: %s, want %s", p, g[p], want)
		}
	}
	// Distrusted, its tokens are refused from the next request on.
	if _, err := call[wire.Empty](t, c, userConn("admin"), wire.OpIssuerDistrust, wire.IssuerDistrustReq{Name: ti.iss}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := grantsOf(t, c, ti.sign(t, nil), "/fz/data"); err == nil || !strings.Contains(err.Error(), "not trusted") {
		t.Errorf("a distrusted issuer's token: %v", err)
	}
}

// TestBearerRefusals: each refusal of a JWT says why in one sentence and
// changes nothing at the controller.
func TestBearerRefusals(t *testing.T) {
	c := fuzzController(t)
	ti := trustIssuer(t, c)
	other, _ := auth.NewJWTKey()
	if _, err := c.issueUser(context.Background(), "carol", nil, false, false); err != nil {
		t.Fatal(err)
	}
	revoked := ownJWT(t, c, "carol", "storage.read:/fz/data")
	if _, err := call[wire.Empty](t, c, userConn("admin"), wire.OpUserRevoke, wire.UserRevokeReq{Name: "carol"}); err != nil {
		t.Fatal(err)
	}
	forged := ti.sign(t, nil)
	parts := strings.Split(forged, ".")
	parts[1] = strings.Split(ti.sign(t, func(c *auth.JWTClaims) { c.Scope = "storage.modify:/" }), ".")[1]
	unknownKid := func() string {
		s, err := auth.SignJWT(other, &auth.JWTClaims{Issuer: ti.iss, Subject: "bob", Audience: jwt.Audience{"https://fz.example.org"},
			Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}()
	before := snapshot(t, c)
	for _, r := range []struct {
		name, tok string
		code      wire.Code
		says      string
	}{
		{"forged", strings.Join(parts, "."), wire.CodeTokenInvalid, "signature does not verify"},
		{"expired", ti.sign(t, func(c *auth.JWTClaims) { c.Expiry = jwt.NewNumericDate(time.Now().Add(-time.Minute)) }), wire.CodeTokenExpired, "the token expired at"},
		{"wrong-audience", ti.sign(t, func(c *auth.JWTClaims) { c.Audience = jwt.Audience{"https://other.example.org"} }), wire.CodeTokenInvalid,
			`audience is "https://other.example.org", but this domain wants "https://fz.example.org"`},
		{"wrong-issuer", ti.sign(t, func(c *auth.JWTClaims) { c.Issuer = "https://evil.example.org" }), wire.CodeTokenInvalid, `issuer "https://evil.example.org" is not trusted by domain fz`},
		{"unknown-key", unknownKid, wire.CodeTokenInvalid, "is none of issuer https://idp.example.org's keys"},
		{"revoked-subject", revoked, wire.CodeTokenRevoked, "the credentials of carol@fz have been revoked"},
		{"none", "eyJhbGciOiJub25lIn0.eyJpc3MiOiJpIn0.", wire.CodeTokenInvalid, `algorithm "none"`},
	} {
		for _, op := range []wire.Op{wire.OpBearerCheck, wire.OpResolve} {
			var err error
			if op == wire.OpBearerCheck {
				_, err = call[wire.BearerCheckResp](t, c, gatewayConn(), op, wire.BearerCheckReq{Token: r.tok})
			} else {
				_, _, err = grantsOf(t, c, r.tok, "/fz/data/pub")
			}
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != r.code || !strings.Contains(we.Message, r.says) || strings.Count(we.Message, ". ") > 0 {
				t.Errorf("%s (%s): %v, want code %d saying %q", r.name, op, err, r.code, r.says)
			}
		}
	}
	// An issuer trusted by a user who administers nothing: refused.
	jwks, _ := auth.JWKSOf(other)
	if _, err := call[wire.Empty](t, c, userConn("alice"), wire.OpIssuerTrust, wire.IssuerInfo{
		Name: "evil", Issuer: "https://evil.example.org", Audience: "a", Base: "/fz/data", JWKS: jwks}); wire.CodeOf(err) != wire.CodeAccess {
		t.Errorf("trust-issuer by alice: %v", err)
	}
	if after := snapshot(t, c); after != before {
		t.Fatal("refused bearer tokens changed the controller's state")
	}
}

// TestJWTKeyMadeOnStart: a domain stored without a JWT key (made before
// there was one) gets one on its next start, and keeps it.
func TestJWTKeyMadeOnStart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, err := Start(ctx, Config{StateDir: dir, Domain: "fz", Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.st.Delete(ctx, keyJWTKey); err != nil {
		t.Fatal(err)
	}
	c.Close()
	var kids []string
	for range 2 {
		c, err = Start(ctx, Config{StateDir: dir, Listen: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		kid, err := auth.JWTKeyID(&c.keys.jwtKey.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		kids = append(kids, kid)
		c.Close()
	}
	if kids[0] != kids[1] {
		t.Fatalf("the JWT key changed between starts: %v", kids)
	}
}

// TestJWTReaddedUser: a user revoked and added again at once (within
// the second of an old token's iat, which counts whole seconds) does
// not revive the old token; a token made after works at once.
func TestJWTReaddedUser(t *testing.T) {
	c := fuzzController(t)
	ctx := context.Background()
	old := ownJWT(t, c, "alice", "storage.read:/fz/data")
	if _, err := call[wire.Empty](t, c, userConn("admin"), wire.OpUserRevoke, wire.UserRevokeReq{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.issueUser(ctx, "alice", []string{"staff"}, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := call[wire.BearerCheckResp](t, c, gatewayConn(), wire.OpBearerCheck, wire.BearerCheckReq{Token: old}); wire.CodeOf(err) != wire.CodeTokenRevoked {
		t.Errorf("alice's token from before her revocation: %v", err)
	}
	fresh := ownJWT(t, c, "alice", "storage.read:/fz/data")
	if r, err := call[wire.BearerCheckResp](t, c, gatewayConn(), wire.OpBearerCheck, wire.BearerCheckReq{Token: fresh}); err != nil || r.User != "alice" {
		t.Errorf("alice's token made after she was added again: %+v %v", r, err)
	}
}

// TestIssuerNames: an issuer may not take the home domain's name, nor a
// linked domain's unless it is that domain's own issuer (pando://NAME).
func TestIssuerNames(t *testing.T) {
	c := fuzzController(t)
	if err := put(context.Background(), c.st, pfxLink+"tacc", wire.DomainLink{Name: "tacc"}); err != nil {
		t.Fatal(err)
	}
	key, _ := auth.NewJWTKey()
	jwks, _ := auth.JWKSOf(key)
	before := snapshot(t, c)
	for _, r := range []struct{ name, iss, says string }{
		{"fz", "https://idp.example.org", "this domain's own name"},
		{"tacc", "https://idp.example.org", "the name of a linked domain"},
	} {
		_, err := call[wire.Empty](t, c, userConn("admin"), wire.OpIssuerTrust, wire.IssuerInfo{Name: r.name, Issuer: r.iss, Audience: "a", Base: "/fz/data", JWKS: jwks})
		if err == nil || !strings.Contains(err.Error(), r.says) {
			t.Errorf("issuer %s named %s: %v", r.iss, r.name, err)
		}
	}
	if after := snapshot(t, c); after != before {
		t.Fatal("refused issuers changed the state")
	}
	if _, err := call[wire.Empty](t, c, userConn("admin"), wire.OpIssuerTrust, wire.IssuerInfo{Name: "tacc", Issuer: "pando://tacc", Audience: "a", Base: "/fz/data", JWKS: jwks}); err != nil {
		t.Errorf("the linked domain's own issuer under its name: %v", err)
	}
}

// TestLinkUnderIssuerName: a domain is not linked under the name of a
// trusted issuer (whose principals are SUB@NAME), but for that domain's
// own issuer.
func TestLinkUnderIssuerName(t *testing.T) {
	c := fuzzController(t)
	ctx := context.Background()
	key, _ := auth.NewJWTKey()
	jwks, _ := auth.JWKSOf(key)
	if _, err := call[wire.Empty](t, c, userConn("admin"), wire.OpIssuerTrust, wire.IssuerInfo{Name: "idp", Issuer: "https://idp.example.org", Audience: "a", Base: "/fz/data", JWKS: jwks}); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, c)
	err := c.storeLink(ctx, wire.DomainLink{Name: "idp", Admit: wire.AdmitAll})
	if err == nil || !strings.Contains(err.Error(), "names a trusted token issuer") {
		t.Fatalf("a link under an issuer's name: %v", err)
	}
	if after := snapshot(t, c); after != before {
		t.Fatal("the refused link changed the state")
	}
	if _, err := call[wire.Empty](t, c, userConn("admin"), wire.OpIssuerTrust, wire.IssuerInfo{Name: "tacc", Issuer: "pando://tacc", Audience: "a", Base: "/fz/data", JWKS: jwks}); err != nil {
		t.Fatal(err)
	}
	if err := c.storeLink(ctx, wire.DomainLink{Name: "tacc", Admit: wire.AdmitAll}); err != nil {
		t.Fatalf("a link under the name of the domain's own issuer: %v", err)
	}
}
