package share

import (
	"context"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// TestSignInTokenRefused: a sign-in token (for gateways) is signed by the
// same controller key as share tokens; a share must not take it, even
// one that names the share and grants every right, and the connection
// keeps no token.
func TestSignInTokenRefused(t *testing.T) {
	pub, priv, err := auth.NewTokenKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Name: "fz", Domain: "fuzz", Root: t.TempDir(), TokenKey: pub})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	now := time.Now()
	signed, err := auth.SignToken(priv, &auth.Token{ID: "t", Principal: "alice@fuzz", Share: "fz", SignIn: true,
		Grants: []auth.Grant{{Path: "", Rights: auth.All}}, Issued: now, Expires: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	ss := &session{peer: auth.Identity{Domain: "fuzz", Role: auth.RoleUser, Name: "alice"}}
	sc := &rpc.ServerConn{State: ss}
	meta, _ := wire.Marshal(wire.AuthReq{Token: signed})
	_, err = s.Serve(context.Background(), &rpc.Request{Op: wire.OpAuth, Meta: meta, Conn: sc})
	if codeOf(err) != wire.CodeTokenInvalid {
		t.Fatalf("a sign-in token presented to a share: %v, want a refusal", err)
	}
	if len(ss.tokens) != 0 {
		t.Fatalf("the connection holds %d tokens after the refusal", len(ss.tokens))
	}
}
