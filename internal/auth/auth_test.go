package auth

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func TestRights(t *testing.T) {
	for in, want := range map[string]string{
		"rl": "rl", "lr": "rl", "rlidwka": "rlidwka", "none": "none", "read": "rl", "write": "rlidwk", "all": "rlidwka", "a": "a",
	} {
		r, err := ParseRights(in)
		if err != nil || r.String() != want {
			t.Errorf("ParseRights(%q) = %v, %v; want %s", in, r, err, want)
		}
	}
	for _, bad := range []string{"", "x", "rlx", "READ!"} {
		if _, err := ParseRights(bad); err == nil {
			t.Errorf("ParseRights(%q) accepted", bad)
		}
	}
	if d := (Read | Insert).Describe(); d != "read, insert" {
		t.Errorf("Describe = %q", d)
	}
}

func TestEffectiveInheritanceAndNegatives(t *testing.T) {
	e := func(who, r string) Entry {
		en, err := ParseEntry(who, r)
		if err != nil {
			t.Fatal(err)
		}
		return en
	}
	acls := map[string]ACL{
		"/":                {e("group:admins", "all")},
		"/uva":             {e("anyone", "l")},
		"/uva/data":        {e("group:staff", "rlidw"), e("bob", "k")},
		"/uva/data/secret": {e("-bob", "r")},
		"/uva/data/pub":    {e("-group:staff", "w")},
	}
	bob := Subject{User: "bob", Groups: []string{"staff"}}
	carol := Subject{User: "carol", Groups: []string{"staff"}}
	eve := Subject{User: "eve"}
	admin := Subject{User: "root", Groups: []string{"admins"}}
	cases := []struct {
		s    Subject
		p    string
		want string
	}{
		{bob, "/uva/data/a/b/c", "rlidwk"},
		{bob, "/uva/data/secret/x", "lidwk"},
		{carol, "/uva/data/secret/x", "rlidw"},
		{carol, "/uva/data/pub/x", "rlid"},
		{eve, "/uva/data/x", "l"},
		{eve, "/elsewhere", "none"},
		{bob, "/uva/datastore", "l"}, // "/uva/data" is not a prefix of "/uva/datastore"
		{admin, "/uva/data/secret", "rlidwka"},
	}
	for _, c := range cases {
		if got := Effective(acls, c.s, c.p).String(); got != c.want {
			t.Errorf("%s at %s: %s, want %s", c.s.User, c.p, got, c.want)
		}
	}
}

func TestCleanRel(t *testing.T) {
	for _, ok := range []string{"", "a", "a/b", "a.b/..c", "..."} {
		if _, err := CleanRel(ok); err != nil {
			t.Errorf("CleanRel(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"..", "../a", "a/..", "/a", "a//b", "./a", "a/.", "a\x00b", strings.Repeat("x", 256), strings.Repeat("a/", 2049)} {
		if _, err := CleanRel(bad); err == nil {
			t.Errorf("CleanRel(%q) accepted", bad)
		}
	}
	if !IsUnder("a/b", "a") || IsUnder("ab", "a") || !IsUnder("x", "") {
		t.Error("IsUnder")
	}
}

func testToken(now time.Time) *Token {
	return &Token{ID: "t1", Principal: "bob@uva", Share: "data", Root: "sub",
		Grants: []Grant{{Path: "sub", Rights: Read | List}, {Path: "sub/w", Rights: All}, {Path: "sub/w/no", Rights: 0}},
		Issued: now, Expires: now.Add(time.Minute)}
}

func TestTokens(t *testing.T) {
	pub, priv, _ := NewTokenKey()
	now := time.Now()
	b, err := SignToken(priv, testToken(now))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := VerifyToken(pub, b, now)
	if err != nil {
		t.Fatal(err)
	}
	if !tok.Issued.Equal(now) {
		t.Errorf("issue time lost precision: %v vs %v", tok.Issued, now)
	}
	for rel, want := range map[string]string{"sub": "rl", "sub/x": "rl", "sub/w/x": "rlidwka", "sub/w/no/x": "none", "other": "none", "subx": "none"} {
		if got := tok.RightsAt(rel).String(); got != want {
			t.Errorf("RightsAt(%q) = %s, want %s", rel, got, want)
		}
	}
	if _, err := VerifyToken(pub, b, now.Add(2*time.Minute)); !errors.Is(err, ErrTokenExpired) {
		t.Errorf("expired: %v", err)
	}
	other, _, _ := NewTokenKey()
	if _, err := VerifyToken(other, b, now); !errors.Is(err, ErrTokenInvalid) {
		t.Errorf("wrong key: %v", err)
	}
	tampered := append([]byte(nil), b...)
	tampered[len(tampered)/2] ^= 1
	if _, err := VerifyToken(pub, tampered, now); !errors.Is(err, ErrTokenInvalid) {
		t.Errorf("tampered: %v", err)
	}
}

func TestMutualTLS(t *testing.T) {
	ca, _ := NewCA("uva")
	evil, _ := NewCA("evil")
	issue := func(c *CA, id Identity) tls.Certificate {
		key, keyPEM, _ := NewKey()
		certPEM, _, err := c.Issue(id, key.Public(), time.Hour, []string{"127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	srvID := Identity{Domain: "uva", Role: RoleShare, Name: "data"}
	srv := issue(ca, srvID)
	alice := issue(ca, Identity{Domain: "uva", Role: RoleUser, Name: "alice"})
	mallory := issue(evil, Identity{Domain: "evil", Role: RoleUser, Name: "mallory"})

	handshake := func(client tls.Certificate, pool *CA, expect func(Identity) error) (Identity, error, error) {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", ServerConfig(srv, ca.Pool()))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		peer := make(chan Identity, 1)
		srvErr := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				peer <- Identity{}
				srvErr <- err
				return
			}
			defer c.Close()
			tc := c.(*tls.Conn)
			if err := tc.Handshake(); err != nil {
				peer <- Identity{}
				srvErr <- err
				return
			}
			id, _, err := PeerIdentity(tc.ConnectionState())
			peer <- id
			srvErr <- err
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d := tls.Dialer{Config: ClientConfig(client, pool.Pool(), expect)}
		c, cerr := d.DialContext(ctx, "tcp", ln.Addr().String())
		if cerr == nil {
			c.(*tls.Conn).Handshake()
			buf := make([]byte, 1)
			c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			_, rerr := c.Read(buf)
			if rerr != nil && !errors.Is(rerr, net.ErrClosed) && !strings.Contains(rerr.Error(), "EOF") && !strings.Contains(rerr.Error(), "timeout") {
				cerr = rerr
			}
			c.Close()
		}
		var id Identity
		select {
		case id = <-peer:
		case <-time.After(5 * time.Second):
		}
		return id, cerr, <-srvErr
	}

	id, cerr, serr := handshake(alice, ca, func(id Identity) error {
		if id != srvID {
			return errors.New("wrong server")
		}
		return nil
	})
	if cerr != nil || serr != nil || id.String() != "alice@uva" {
		t.Fatalf("good handshake: client %v, server %v, peer %v", cerr, serr, id)
	}
	// A client certificate from another CA is refused by the server.
	_, cerr, serr = handshake(mallory, ca, nil)
	if serr == nil {
		t.Fatal("the server accepted a certificate from another CA")
	}
	if cerr != nil {
		if msg := ExplainHandshakeError(cerr, "x").Error(); !strings.Contains(msg, "refused your certificate") {
			t.Errorf("unclear: %s", msg)
		}
	}
	// A client trusting another CA refuses the server.
	_, cerr, _ = handshake(alice, evil, nil)
	if cerr == nil || !strings.Contains(ExplainHandshakeError(cerr, "x").Error(), "another domain's CA") {
		t.Fatalf("client trusting another CA: %v", cerr)
	}
	// The identity check refuses a server of the wrong role.
	_, cerr, _ = handshake(alice, ca, func(id Identity) error {
		if id.Role != RoleController {
			return errors.New("expected the controller, but the server is " + id.String())
		}
		return nil
	})
	if cerr == nil {
		t.Fatal("a share passed for the controller")
	}
}

func TestIdentity(t *testing.T) {
	id := Identity{Domain: "uva", Role: RoleUser, Name: "alice"}
	back, err := ParseIdentityURI(id.URI())
	if err != nil || back != id {
		t.Fatalf("round trip: %v %v", back, err)
	}
	for _, bad := range []string{"http://uva/user/a", "pando://uva/god/a", "pando://UVA/user/a", "pando://uva/user/a/b"} {
		if _, err := ParseIdentityURI(bad); err == nil {
			t.Errorf("ParseIdentityURI(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"", "Alice", "-a", "a b", strings.Repeat("a", 65)} {
		if ValidName(bad) == nil {
			t.Errorf("ValidName(%q) accepted", bad)
		}
	}
}
