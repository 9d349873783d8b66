package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// attackRevokedConnection: the open connections of a user whose
// credentials are revoked end with the revocation, and say so: the next
// call on a raw connection and a read through a file the library holds
// open fail with a sentence naming the user and what to do, not with a
// bare "connection lost: EOF". Nothing at the share changes, and another
// user's connection is not disturbed.
func attackRevokedConnection(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	os.WriteFile(filepath.Join(root, "f"), []byte("data"), 0o644)
	bobPath := d.addUser("bob")
	alicePath := d.addUser("alice")
	d.pando(d.admin, "acl", "set", "/uva/alpha", "bob", "read", "alice", "read").ok()
	ctx := context.Background()

	bob := d.client(bobPath)
	var res wire.ResolveResp
	if err := bob.ControllerCall(ctx, wire.OpResolve, wire.ResolveReq{Path: "/uva/alpha"}, &res); err != nil {
		t.Fatal(err)
	}
	conn := dialShare(t, bobPath, res.Addrs[0], "alpha")
	var auth wire.AuthResp
	if _, err := conn.Call(ctx, wire.OpAuth, wire.AuthReq{Token: res.Token}, nil, &auth, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Call(ctx, wire.OpGetAttr, wire.PathReq{Tok: auth.Tok, Path: "f"}, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	f, err := bob.Open(ctx, "/uva/alpha/f", wire.OpenRead)
	if err != nil {
		t.Fatal(err)
	}
	alice := d.client(alicePath)
	af, err := alice.Open(ctx, "/uva/alpha/f", wire.OpenRead)
	if err != nil {
		t.Fatal(err)
	}

	d.pando(d.admin, "user", "revoke", "bob").ok()
	select {
	case <-conn.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("a revoked user's connection is still open")
	}
	told := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: a revoked user was served", what)
		}
		msg := err.Error()
		for _, want := range []string{"bob@uva", "revoked", "pando user add bob"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: %q does not say %q", what, msg, want)
			}
		}
		if strings.Contains(msg, "EOF") || errors.Is(err, rpc.ErrBroken) {
			t.Errorf("%s: a bare connection loss instead of the revocation: %q", what, msg)
		}
	}
	_, err = conn.Call(ctx, wire.OpGetAttr, wire.PathReq{Tok: auth.Tok, Path: "f"}, nil, nil, nil)
	if wire.CodeOf(err) != wire.CodeTokenRevoked {
		t.Errorf("raw connection: code %d, want %d (revoked)", wire.CodeOf(err), wire.CodeTokenRevoked)
	}
	told("raw connection, next call", err)
	buf := make([]byte, 4)
	_, err = f.ReadAt(ctx, buf, 0)
	told("library, read through an open file", err)

	// Alice's open file is served as before, and the file is unchanged.
	if n, err := af.ReadAt(ctx, buf, 0); err != nil || string(buf[:n]) != "data" {
		t.Errorf("another user's read after the revocation: %q, %v", buf[:n], err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); string(got) != "data" {
		t.Errorf("the file changed: %q", got)
	}
}
