package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/testenv/snap"
	"pando.dev/pando/internal/wire"
)

// TestAttacks runs, as a hostile user would, every attempt to get past
// the rights a domain grants: each must be refused with a clear message
// and change nothing at the share. docs/security.md names the rule each
// row holds.
func TestAttacks(t *testing.T) {
	for _, a := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"links", attackLinks},                          // symlinks and hard links past the ACL; setid and root-owned files
		{"local-users", attackLocalUsers},               // a local user borrowing the mount's principal
		{"open-files", attackOpenFiles},                 // one user's open files starving the share
		{"connections", attackConnections},              // one user's connections
		{"requests", attackRequests},                    // one user's requests in flight
		{"refused-write", attackRefusedWrite},           // refused bytes kept in the cache and shown to readers
		{"revoked-connection", attackRevokedConnection}, // a revoked user's live connection
		// What held before, and must keep holding.
		{"hostile-paths", attackHostilePaths},               // '..', NUL, absolute paths, links out of the root
		{"malformed-frames", attackMalformedFrames},         // garbage, oversized lengths, undecodable meta
		{"foreign-certificates", attackForeignCertificates}, // another domain's CA
		{"tokens", attackRevokedAndExpiredTokens},           // expired and revoked tokens
		{"forged-tokens", attackForgedTokens},               // altered, foreign and another user's tokens
		{"silent-connections", attackSilentConnections},     // 2,000 silent connections, 500 half handshakes
	} {
		t.Run(a.name, a.run)
	}
}

// attackLinks tries to reach files past the ACL through symlinks and hard
// links, and to plant setuid or root-owned files on the share's host:
// through the CLI and through a raw protocol client that sends what the
// CLI would not. Each attempt must be refused with a message naming the
// right and the path, and leave the share's tree as it was (every path,
// mode, owner and hash).
func attackLinks(t *testing.T) {
	d := newDomain(t, "d")
	root := d.addShare("data")
	for _, dir := range []string{"alice", "secret", "hidden"} {
		if err := os.Mkdir(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "secret/s.txt"), []byte("secret"), 0o644)
	os.WriteFile(filepath.Join(root, "hidden/h.txt"), []byte("hidden"), 0o644)
	alice := d.addUser("alice")
	d.pando(d.admin, "acl", "set", "/d/data/alice", "alice", "rlidwk").ok()
	d.pando(d.admin, "acl", "set", "/d/data/secret", "-alice", "r").ok()
	// alice's own symlinks: making them is within her rights.
	d.pando(alice, "ln", "-s", "../secret", "/d/data/alice/alias").ok()
	d.pando(alice, "ln", "-s", "../hidden/h.txt", "/d/data/alice/hl").ok()
	// One a process on the share's host made, and one leaving the share.
	os.Symlink("../secret/s.txt", filepath.Join(root, "alice/host-link"))
	os.Symlink("/etc", filepath.Join(root, "alice/etc"))
	local := filepath.Join(t.TempDir(), "f")
	os.WriteFile(local, []byte("planted"), 0o755)
	before := snap.Take(t, root)

	t.Run("cli", func(t *testing.T) {
		for _, c := range []struct {
			args      []string
			fragments []string
		}{
			{[]string{"cat", "/d/data/alice/alias/s.txt"}, []string{"alice@d", "read right (r)", "/d/data/secret/s.txt", "symlink"}},
			{[]string{"cat", "/d/data/alice/host-link"}, []string{"alice@d", "read right (r)", "/d/data/secret/s.txt", "symlink"}},
			{[]string{"get", "/d/data/alice/alias/s.txt", filepath.Join(t.TempDir(), "got")}, []string{"alice@d", "read right (r)", "/d/data/secret/s.txt"}},
			{[]string{"put", local, "/d/data/alice/alias/x"}, []string{"alice@d", "insert right (i)", "/d/data/secret/x", "symlink"}},
			{[]string{"put", local, "/d/data/alice/host-link"}, []string{"alice@d", "write right (w)", "/d/data/secret/s.txt"}},
			{[]string{"rm", "/d/data/alice/alias/s.txt"}, []string{"alice@d", "delete right (d)", "/d/data/secret/s.txt"}},
			{[]string{"mkdir", "/d/data/alice/alias/sub"}, []string{"alice@d", "insert right (i)", "/d/data/secret/sub"}},
			{[]string{"mv", "/d/data/alice/alias/s.txt", "/d/data/alice/mine"}, []string{"alice@d", "delete right (d)", "/d/data/secret/s.txt"}},
			{[]string{"cat", "/d/data/alice/hl"}, []string{"alice@d", "read right (r)", "/d/data/hidden/h.txt"}},
			{[]string{"ln", "/d/data/hidden/h.txt", "/d/data/alice/h.txt"}, []string{"alice@d", "right", "/d/data/hidden/h.txt"}},
			{[]string{"ln", "/d/data/secret/s.txt", "/d/data/alice/s.txt"}, []string{"alice@d", "read", "/d/data/secret/s.txt"}},
			{[]string{"cat", "/d/data/alice/etc/passwd"}, []string{"leads outside the share"}},
		} {
			d.pando(alice, c.args...).fails(4, c.fragments...)
		}
		d.pando(alice, "cat", "/d/data/alice/h.txt").fails(3)
		snap.Same(t, "a refused CLI command", before, snap.Take(t, root))
	})

	t.Run("raw", func(t *testing.T) {
		ctx := context.Background()
		var res wire.ResolveResp
		if err := d.client(alice).ControllerCall(ctx, wire.OpResolve, wire.ResolveReq{Path: "/d/data"}, &res); err != nil {
			t.Fatal(err)
		}
		conn := dialShare(t, alice, res.Addrs[0], "data")
		var auth wire.AuthResp
		if _, err := conn.Call(ctx, wire.OpAuth, wire.AuthReq{Token: res.Token}, nil, &auth, nil); err != nil {
			t.Fatal(err)
		}
		tok := auth.Tok
		for _, c := range []struct {
			name string
			op   wire.Op
			req  any
			data []byte
			code wire.Code
		}{
			{"open through a link", wire.OpOpen, wire.OpenReq{Tok: tok, Path: "alice/alias/s.txt", Flags: wire.OpenRead}, nil, wire.CodeAccess},
			{"open a link, followed", wire.OpOpen, wire.OpenReq{Tok: tok, Path: "alice/host-link", Flags: wire.OpenRead | wire.OpenFollow}, nil, wire.CodeAccess},
			{"open a link for writing, followed", wire.OpOpen, wire.OpenReq{Tok: tok, Path: "alice/host-link", Flags: wire.OpenWrite | wire.OpenTrunc | wire.OpenFollow}, nil, wire.CodeAccess},
			{"open a link, not followed", wire.OpOpen, wire.OpenReq{Tok: tok, Path: "alice/host-link", Flags: wire.OpenRead}, nil, wire.CodeLoop},
			{"getfile through a link", wire.OpGetFile, wire.GetFileReq{Tok: tok, Path: "alice/alias/s.txt", Max: 1 << 20}, nil, wire.CodeAccess},
			{"create through a link", wire.OpCreate, wire.OpenReq{Tok: tok, Path: "alice/alias/new", Flags: wire.OpenWrite, Mode: 0o644}, nil, wire.CodeAccess},
			{"putfile through a link", wire.OpPutFile, wire.PutFileReq{Tok: tok, Path: "alice/alias/s.txt", Mode: 0o644}, []byte("x"), wire.CodeAccess},
			{"truncate a link", wire.OpTruncate, wire.TruncateReq{Tok: tok, Path: "alice/host-link"}, nil, wire.CodeLoop},
			{"chmod a link", wire.OpSetAttr, wire.SetAttrReq{Tok: tok, Path: "alice/host-link", Valid: wire.SetMode, Mode: 0o777}, nil, wire.CodeLoop},
			{"setxattr through a link", wire.OpSetXattr, wire.SetXattrReq{Tok: tok, Path: "alice/alias/s.txt", Name: "user.x", Value: []byte("v")}, nil, wire.CodeAccess},
			{"rename in through a link", wire.OpRename, wire.RenameReq{Tok: tok, Old: "alice/etc", New: "alice/alias/etc"}, nil, wire.CodeAccess},
			{"hard link of a file only listed", wire.OpLink, wire.RenameReq{Tok: tok, Old: "hidden/h.txt", New: "alice/h.txt"}, nil, wire.CodeAccess},
			{"hard link through a link", wire.OpLink, wire.RenameReq{Tok: tok, Old: "alice/alias/s.txt", New: "alice/s.txt"}, nil, wire.CodeAccess},
			{"an absolute link", wire.OpGetAttr, wire.PathReq{Tok: tok, Path: "alice/etc/passwd"}, nil, wire.CodeEscape},
			{"'..'", wire.OpGetAttr, wire.PathReq{Tok: tok, Path: "alice/../secret/s.txt"}, nil, wire.CodeEscape},
		} {
			_, err := conn.Call(ctx, c.op, c.req, c.data, nil, nil)
			if wire.CodeOf(err) != c.code {
				t.Errorf("%s: got %v (code %d), want code %d", c.name, err, wire.CodeOf(err), c.code)
			}
		}
		snap.Same(t, "a refused request", before, snap.Take(t, root))

		// No privilege from the grid: setuid and setgid bits are dropped,
		// and what alice makes does not belong to root.
		var h wire.OpenResp
		if _, err := conn.Call(ctx, wire.OpCreate, wire.OpenReq{Tok: tok, Path: "alice/true", Flags: wire.OpenWrite, Mode: 0o6755}, nil, &h, nil); err != nil {
			t.Fatal(err)
		}
		conn.Call(ctx, wire.OpClose, wire.HandleReq{Handle: h.Handle}, nil, nil, nil)
		if _, err := conn.Call(ctx, wire.OpSetAttr, wire.SetAttrReq{Tok: tok, Path: "alice/true", Valid: wire.SetMode, Mode: 0o4755}, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Call(ctx, wire.OpMkdir, wire.MkdirReq{Tok: tok, Path: "alice/dir", Mode: 0o2755}, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"alice/true", "alice/dir"} {
			var st syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(root, n), &st); err != nil {
				t.Fatal(err)
			}
			if st.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 {
				t.Errorf("%s has mode %o: a client made a setuid or setgid file", n, st.Mode&0o7777)
			}
			if os.Geteuid() == 0 && st.Uid == 0 {
				t.Errorf("%s belongs to root: a client made a root-owned file on the share's host", n)
			}
		}
	})
	if t.Failed() {
		t.Logf("share log:\n%s", strings.TrimSpace(d.shares["data"].output()))
	}
}

// attackForgedTokens presents tokens that are not the caller's own valid
// one: altered in any byte, issued to another user, and for another
// share. Each is refused and the connection serves nothing with it.
func attackForgedTokens(t *testing.T) {
	d := newDomain(t, "d")
	d.addShare("data")
	d.addShare("other")
	bob := d.addUser("bob")
	carol := d.addUser("carol")
	d.pando(d.admin, "acl", "set", "/d/data", "bob", "read").ok()
	d.pando(d.admin, "acl", "set", "/d/data", "carol", "read").ok()
	ctx := context.Background()
	resolve := func(cfg, p string) wire.ResolveResp {
		var res wire.ResolveResp
		if err := d.client(cfg).ControllerCall(ctx, wire.OpResolve, wire.ResolveReq{Path: p}, &res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	mine := resolve(bob, "/d/data")
	conn := dialShare(t, bob, mine.Addrs[0], "data")
	for i := 0; i < len(mine.Token); i += max(1, len(mine.Token)/40) {
		forged := append([]byte(nil), mine.Token...)
		forged[i] ^= 0x20
		if _, err := conn.Call(ctx, wire.OpAuth, wire.AuthReq{Token: forged}, nil, nil, nil); err == nil {
			t.Fatalf("a token altered at byte %d was accepted", i)
		}
	}
	if _, err := conn.Call(ctx, wire.OpAuth, wire.AuthReq{Token: resolve(carol, "/d/data").Token}, nil, nil, nil); wire.CodeOf(err) != wire.CodeTokenInvalid {
		t.Errorf("carol's token on bob's connection: %v", err)
	}
	if _, err := conn.Call(ctx, wire.OpAuth, wire.AuthReq{Token: resolve(bob, "/d/other").Token}, nil, nil, nil); wire.CodeOf(err) != wire.CodeTokenInvalid {
		t.Errorf("a token for share other at share data: %v", err)
	}
	// Nothing installed, nothing served; the real token still works.
	if _, err := conn.Call(ctx, wire.OpGetAttr, wire.PathReq{Tok: 1, Path: ""}, nil, nil, nil); wire.CodeOf(err) != wire.CodeNoToken {
		t.Errorf("a request after refused tokens: %v", err)
	}
	var auth wire.AuthResp
	if _, err := conn.Call(ctx, wire.OpAuth, wire.AuthReq{Token: mine.Token}, nil, &auth, nil); err != nil {
		t.Fatalf("bob's own token: %v", err)
	}
}

// attackSilentConnections holds 2,000 connections that say nothing and 500
// that stop halfway through the TLS handshake against a share: it keeps
// serving everyone else, and frees them all once they go.
func attackSilentConnections(t *testing.T) {
	d := newDomain(t, "d")
	root := d.addShare("data")
	os.WriteFile(filepath.Join(root, "f"), []byte("still here"), 0o644)
	addr, _ := shareAddr(t, d, "data")
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := 0; i < 2500; i++ {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		held = append(held, c)
		if i >= 2000 {
			// The first bytes of a ClientHello, then nothing.
			c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03})
		}
	}
	if got := d.pando(d.admin, "cat", "/d/data/f").ok().stdout; got != "still here" {
		t.Fatalf("with 2,500 silent connections held: %q", got)
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	if got := d.pando(d.admin, "cat", "/d/data/f").ok().stdout; got != "still here" {
		t.Fatalf("after they went: %q", got)
	}
}
