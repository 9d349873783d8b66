package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// TestACLInheritanceAndNegativeEntries: rights granted on a prefix reach
// everything below it, and a negative entry below wins.
func TestACLInheritanceAndNegativeEntries(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	os.MkdirAll(filepath.Join(root, "pub/deep/er"), 0o755)
	os.MkdirAll(filepath.Join(root, "secret"), 0o755)
	os.WriteFile(filepath.Join(root, "pub/deep/er/f"), []byte("public"), 0o644)
	os.WriteFile(filepath.Join(root, "secret/f"), []byte("secret"), 0o644)
	bob := d.addUser("bob", "staff")
	carol := d.addUser("carol", "staff")

	d.pando(d.admin, "acl", "set", "/uva/alpha", "group:staff", "rlidw").ok()
	d.pando(d.admin, "acl", "set", "/uva/alpha/secret", "-bob", "r").ok()

	if got := d.pando(bob, "cat", "/uva/alpha/pub/deep/er/f").ok().stdout; got != "public" {
		t.Errorf("inherited read: %q", got)
	}
	d.pando(bob, "cat", "/uva/alpha/secret/f").fails(4, "bob@uva", "read right (r)")
	// The negative entry takes only r: bob may still list and write there.
	d.pando(bob, "ls", "/uva/alpha/secret").ok()
	if got := d.pando(carol, "cat", "/uva/alpha/secret/f").ok().stdout; got != "secret" {
		t.Errorf("carol is not denied: %q", got)
	}
	// A negative entry for the group wins over a user's own grant.
	d.pando(d.admin, "acl", "set", "/uva/alpha/pub", "carol", "all", "-group:staff", "iw").ok()
	tmp := filepath.Join(t.TempDir(), "new")
	os.WriteFile(tmp, []byte("n"), 0o644)
	d.pando(carol, "put", tmp, "/uva/alpha/pub/new").fails(4, "carol@uva")
	// Removing the entry restores the inherited rights, at once.
	d.pando(d.admin, "acl", "set", "/uva/alpha/secret", "-bob", "none").ok()
	if got := d.pando(bob, "cat", "/uva/alpha/secret/f").ok().stdout; got != "secret" {
		t.Errorf("after removing the negative entry: %q", got)
	}
}

// attackRevokedAndExpiredTokens: a revoked user is cut off at once, even with
// a token and connections already in hand; an expired token is refused
// with a clear error and the client library renews it transparently.
func attackRevokedAndExpiredTokens(t *testing.T) {
	d := newDomain(t, "uva", "--token-ttl", "2s")
	root := d.addShare("alpha")
	os.WriteFile(filepath.Join(root, "f"), []byte("data"), 0o644)
	bobPath := d.addUser("bob")
	d.pando(d.admin, "acl", "set", "/uva/alpha", "bob", "read").ok()
	ctx := context.Background()

	// Expiry: a raw token used after its lifetime is refused.
	bob := d.client(bobPath)
	var res wire.ResolveResp
	if err := bob.ControllerCall(ctx, wire.OpResolve, wire.ResolveReq{Path: "/uva/alpha"}, &res); err != nil {
		t.Fatal(err)
	}
	conn := dialShare(t, bobPath, res.Addrs[0], "alpha")
	time.Sleep(time.Until(time.Unix(0, res.Expires)) + 100*time.Millisecond)
	_, err := conn.Call(ctx, wire.OpAuth, wire.AuthReq{Token: res.Token}, nil, nil, nil)
	if wire.CodeOf(err) != wire.CodeTokenExpired || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired token: got %v", err)
	}
	// The library renews tokens by itself, across several lifetimes.
	for i := 0; i < 3; i++ {
		f, err := bob.Open(ctx, "/uva/alpha/f", wire.OpenRead)
		if err != nil {
			t.Fatalf("read after renewal %d: %v", i, err)
		}
		f.Close(ctx)
		time.Sleep(1200 * time.Millisecond)
	}

	// Revocation: bob holds a live token and connections.
	f, err := bob.Open(ctx, "/uva/alpha/f", wire.OpenRead)
	if err != nil {
		t.Fatal(err)
	}
	d.pando(d.admin, "user", "revoke", "bob").ok()
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 4)
		_, err = f.ReadAt(ctx, buf, 0)
		if err != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err == nil {
		t.Fatal("a revoked user can still read through an open handle")
	}
	if _, err := bob.Stat(ctx, "/uva/alpha/f"); err == nil || !strings.Contains(err.Error(), "revoked") && !strings.Contains(err.Error(), "refused your certificate") {
		t.Fatalf("a revoked user's new request: %v", err)
	}
	d.pando(bobPath, "cat", "/uva/alpha/f").fails(4, "revoked")
	// The old token, replayed on a fresh connection by someone holding it,
	// is refused too (the connection itself is refused: the cert is revoked).
	if _, err := rpc.Dial(ctx, res.Addrs[0], shareTLS(t, bobPath, "alpha"), wire.ChannelControl); err == nil {
		c2 := dialShare(t, bobPath, res.Addrs[0], "alpha")
		if _, err := c2.Call(ctx, wire.OpAuth, wire.AuthReq{Token: res.Token}, nil, nil, nil); err == nil {
			t.Fatal("a revoked user's token was accepted")
		}
	}
}

func shareTLS(t *testing.T, cfgPath, share string) *tls.Config {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := cfg.ClientTLS(func(id auth.Identity) error {
		if id.Role != auth.RoleShare || id.Name != share {
			return errors.New("not the share")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

func dialShare(t *testing.T, cfgPath, addr, share string) *rpc.Conn {
	t.Helper()
	conn, err := rpc.Dial(context.Background(), addr, shareTLS(t, cfgPath, share), wire.ChannelControl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// shareAddr asks the controller where a share listens.
func shareAddr(t *testing.T, d *domain, share string) (string, []byte) {
	t.Helper()
	var res wire.ResolveResp
	if err := d.client(d.admin).ControllerCall(context.Background(), wire.OpResolve, wire.ResolveReq{Path: "/" + d.name + "/" + share}, &res); err != nil {
		t.Fatal(err)
	}
	return res.Addrs[0], res.Token
}

// attackForeignCertificates: credentials from another domain's CA are
// refused by the controller and by shares, with a clear message.
func attackForeignCertificates(t *testing.T) {
	d := newDomain(t, "uva")
	d.addShare("alpha")
	other := newDomain(t, "evil")
	foreign, err := config.Load(other.admin)
	if err != nil {
		t.Fatal(err)
	}
	// Point the foreign credentials at our controller.
	foreign.Controller = d.addr
	path := filepath.Join(t.TempDir(), "foreign.json")
	if err := foreign.Save(path); err != nil {
		t.Fatal(err)
	}
	r := d.pando(path, "ls")
	if r.code == 0 {
		t.Fatal("a certificate from another CA was accepted by the controller")
	}
	r.fails(r.code, "another domain's CA")

	// Straight to the share, trusting its CA but holding a foreign cert.
	addr, _ := shareAddr(t, d, "alpha")
	ours, _ := config.Load(d.admin)
	mixed := *ours
	mixed.Cert, mixed.Key = foreign.Cert, foreign.Key
	mixedPath := filepath.Join(t.TempDir(), "mixed.json")
	mixed.Save(mixedPath)
	_, err = rpc.Dial(context.Background(), addr, shareTLS(t, mixedPath, "alpha"), wire.ChannelControl)
	if err == nil {
		t.Fatal("the share accepted a certificate from another CA")
	}
	if msg := auth.ExplainHandshakeError(errors.Unwrap(err), addr).Error(); !strings.Contains(msg, "refused your certificate") {
		t.Errorf("unclear refusal: %s", msg)
	}
}

// attackHostilePaths: '..' sent raw to a share, and a symlink to /etc inside
// the exported directory, are refused; the share keeps serving.
func attackHostilePaths(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	if err := os.Symlink("/etc", filepath.Join(root, "etclink")); err != nil {
		t.Fatal(err)
	}
	os.Symlink("../../../../../../etc/passwd", filepath.Join(root, "dotdot"))
	os.WriteFile(filepath.Join(root, "ok"), []byte("ok"), 0o644)

	d.pando(d.admin, "cat", "/uva/alpha/etclink/passwd").fails(4, "outside the share")
	d.pando(d.admin, "ls", "/uva/alpha/etclink/").fails(4, "outside the share")
	d.pando(d.admin, "cat", "/uva/alpha/dotdot").fails(4, "outside the share")
	d.pando(d.admin, "get", "/uva/alpha/etclink/hostname", t.TempDir()).fails(4, "outside the share")
	// The link itself is visible as a link.
	if ls := d.pando(d.admin, "ls", "-l", "/uva/alpha").ok().stdout; !strings.Contains(ls, "etclink -> /etc") {
		t.Errorf("ls -l:\n%s", ls)
	}

	addr, token := shareAddr(t, d, "alpha")
	conn := dialShare(t, d.admin, addr, "alpha")
	ctx := context.Background()
	var auth wire.AuthResp
	if _, err := conn.Call(ctx, wire.OpAuth, wire.AuthReq{Token: token}, nil, &auth, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../etc/passwd", "..", "a/../../etc", "/etc/passwd", "a//b", "./ok", "ok\x00x"} {
		_, err := conn.Call(ctx, wire.OpGetAttr, wire.PathReq{Tok: auth.Tok, Path: p}, nil, nil, nil)
		if wire.CodeOf(err) != wire.CodeEscape {
			t.Errorf("getattr %q: got %v, want a refusal", p, err)
		}
		_, err = conn.Call(ctx, wire.OpRename, wire.RenameReq{Tok: auth.Tok, Old: "ok", New: p}, nil, nil, nil)
		if wire.CodeOf(err) != wire.CodeEscape {
			t.Errorf("rename to %q: got %v, want a refusal", p, err)
		}
	}
	if _, err := conn.Call(ctx, wire.OpGetAttr, wire.PathReq{Tok: auth.Tok, Path: "ok"}, nil, nil, nil); err != nil {
		t.Fatalf("the share stopped serving after hostile paths: %v", err)
	}
}

// attackMalformedFrames: garbage on a connection gets a clear error frame and
// ends only that connection.
func attackMalformedFrames(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	os.WriteFile(filepath.Join(root, "f"), []byte("still here"), 0o644)
	addr, _ := shareAddr(t, d, "alpha")

	for name, frame := range map[string][]byte{
		"garbage header": bytes.Repeat([]byte{0xee}, 64),
		"oversized data": append([]byte{1, 0, 0, 20, 0, 0, 0, 1, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff}, make([]byte, 8)...),
	} {
		t.Run(name, func(t *testing.T) {
			tc, err := tls.Dial("tcp", addr, shareTLS(t, d.admin, "alpha"))
			if err != nil {
				t.Fatal(err)
			}
			defer tc.Close()
			tc.SetDeadline(time.Now().Add(10 * time.Second))
			tc.Write(wire.EncodePreface(wire.Preface{Version: wire.Version, Channel: wire.ChannelControl}))
			if _, err := wire.ReadPreface(tc); err != nil {
				t.Fatal(err)
			}
			tc.Write(frame)
			f, err := wire.ReadFrame(tc)
			if err != nil {
				t.Fatalf("no error frame: %v", err)
			}
			var we wire.Error
			if f.Type != wire.TypeError || wire.Unmarshal(f.Meta, &we) != nil || we.Code != wire.CodeMalformed || !strings.Contains(we.Message, "malformed frame") {
				t.Fatalf("got frame %+v %+v", f.Header, we)
			}
			if _, err := wire.ReadFrame(tc); !errors.Is(err, io.EOF) {
				t.Errorf("connection not closed after a malformed frame: %v", err)
			}
		})
	}
	// A valid header with undecodable meta: an error, and the connection lives.
	conn := dialShare(t, d.admin, addr, "alpha")
	if _, err := conn.Call(context.Background(), wire.OpGetAttr, "not a struct", nil, nil, nil); wire.CodeOf(err) != wire.CodeMalformed {
		t.Errorf("undecodable request: %v", err)
	}
	if _, err := conn.Call(context.Background(), wire.OpPing, wire.Empty{}, nil, nil, nil); err != nil {
		t.Errorf("connection died after an undecodable request: %v", err)
	}
	if got := d.pando(d.admin, "cat", "/uva/alpha/f").ok().stdout; got != "still here" {
		t.Errorf("share stopped serving: %q", got)
	}
}

// TestNoRightsClearError: a user without rights gets an error naming the
// missing right, and nothing changes at the share.
func TestNoRightsClearError(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	os.WriteFile(filepath.Join(root, "f"), []byte("x"), 0o644)
	eve := d.addUser("eve")
	d.pando(eve, "cat", "/uva/alpha/f").fails(4, "eve@uva lacks the read right (r)")
	d.pando(eve, "mkdir", "/uva/alpha/d").fails(4, "eve@uva lacks the insert right (i)")
	d.pando(eve, "rm", "/uva/alpha/f").fails(4, "eve@uva lacks the delete right (d)")
	d.pando(eve, "acl", "set", "/uva/alpha", "eve", "all").fails(4, "administer right (a)")
	if _, err := os.Stat(filepath.Join(root, "d")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("a refused mkdir created the directory")
	}
	if _, err := os.Stat(filepath.Join(root, "f")); err != nil {
		t.Error("a refused rm removed the file")
	}
}
