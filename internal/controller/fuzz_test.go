package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// fuzzController is a controller of domain fz with a share "data" mounted
// at /fz/data, a share "copy" mounted nowhere, a user alice who may read and list there but not in
// /fz/data/secret, and nothing else.
func fuzzController(tb testing.TB) *Controller {
	tb.Helper()
	ctx := context.Background()
	c, err := Start(ctx, Config{StateDir: tb.TempDir(), Domain: "fz", Listen: "127.0.0.1:0"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	for _, name := range []string{"data", "copy"} {
		if err := put(ctx, c.st, pfxShare+name, shareRec{Name: name, Addrs: []string{"127.0.0.1:1"}}); err != nil {
			tb.Fatal(err)
		}
	}
	if err := put(ctx, c.st, pfxMount+"/fz/data", wire.MountEntry{Prefix: "/fz/data", Share: "data", SharePath: "exp"}); err != nil {
		tb.Fatal(err)
	}
	if _, err := c.issueUser(ctx, "alice", []string{"staff"}, false, false); err != nil {
		tb.Fatal(err)
	}
	for p, es := range map[string][]wire.ACLEntry{
		"/fz/data":        {{Who: "alice", Rights: "rl"}},
		"/fz/data/secret": {{Who: "alice", Rights: "r", Negative: true}},
	} {
		if err := put(ctx, c.st, pfxACL+p, es); err != nil {
			tb.Fatal(err)
		}
	}
	return c
}

func userConn(name string) *rpc.ServerConn {
	return &rpc.ServerConn{State: &peer{id: auth.Identity{Domain: "fz", Role: auth.RoleUser, Name: name}}}
}

// snapshot is the controller's whole state.
func snapshot(tb testing.TB, c *Controller) string {
	return snapshotBut(tb, c, "")
}

// snapshotBut is the controller's whole state but the credentials of
// user own, which own may change (a password, S3 keys), and its
// heartbeat (which a fuzz run longer than 5 s saw change by itself).
func snapshotBut(tb testing.TB, c *Controller, own string) string {
	kvs, err := c.st.List(context.Background(), "")
	if err != nil {
		tb.Fatal(err)
	}
	var b strings.Builder
	for _, kv := range kvs {
		if strings.HasPrefix(kv.Key, pfxCtrl) {
			continue // the controller's own liveness record, rewritten every heartbeat
		}
		if own != "" {
			if kv.Key == pfxUser+own {
				var u userRec
				if err := wire.Unmarshal(kv.Value, &u); err != nil {
					tb.Fatal(err)
				}
				u.Password = ""
				kv.Value, _ = wire.Marshal(u)
			}
			if strings.HasPrefix(kv.Key, pfxS3Key) {
				var k s3KeyRec
				if err := wire.Unmarshal(kv.Value, &k); err != nil {
					tb.Fatal(err)
				}
				if k.User == own {
					continue
				}
			}
		}
		fmt.Fprintf(&b, "%s=%x\n", kv.Key, kv.Value)
	}
	return b.String()
}

// controllerSeeds are requests of every op the controller serves.
func controllerSeeds(f *testing.F) {
	for _, s := range []struct {
		op  wire.Op
		msg any
	}{
		{wire.OpPing, wire.Empty{}},
		{wire.OpWhoAmI, wire.Empty{}},
		{wire.OpResolve, wire.ResolveReq{Path: "/fz/data/a/b"}},
		{wire.OpResolve, wire.ResolveReq{Path: "/fz/data/secret", Proxy: "data"}},
		{wire.OpResolve, wire.ResolveReq{Path: "/fz"}},
		{wire.OpResolve, wire.ResolveReq{Path: "/fz/../etc"}},
		{wire.OpMountList, wire.Empty{}},
		{wire.OpMountAdd, wire.MountEntry{Prefix: "/fz/mine", Share: "data", SharePath: "/../x"}},
		{wire.OpMountAdd, wire.MountEntry{Prefix: "/fz/two", Share: "data", More: []wire.Location{{Share: "copy", SharePath: "/y/", Kind: wire.LocReplica}}}},
		{wire.OpMountAdd, wire.MountEntry{Prefix: "/fz/bad", Share: "data", More: []wire.Location{{Share: "copy", SharePath: "../y", Kind: wire.LocReplica}, {Share: "data", Kind: 9}}}},
		{wire.OpMountRemove, wire.PathReq{Path: "/fz/data"}},
		{wire.OpShareRegister, wire.ShareRegisterReq{Name: "evil", Addrs: []string{"10.0.0.1:1"}, CSR: []byte("not a csr")}},
		{wire.OpShareList, wire.Empty{}},
		{wire.OpUserAdd, wire.UserAddReq{Name: "mallory", Groups: []string{"admins"}}},
		{wire.OpUserList, wire.Empty{}},
		{wire.OpUserRevoke, wire.UserRevokeReq{Name: "admin"}},
		{wire.OpACLGet, wire.PathReq{Path: "/fz/data/secret"}},
		{wire.OpACLSet, wire.ACLSetReq{Path: "/fz/data/secret", Entries: []wire.ACLEntry{{Who: "alice", Rights: "all"}}}},
		{wire.OpACLSet, wire.ACLSetReq{Path: "/", Entries: []wire.ACLEntry{{Who: "group:staff", Rights: "a"}}, Replace: true}},
		{wire.OpWatch, wire.Empty{}},
		{wire.OpTokenCreate, wire.TokenCreateReq{TTL: int64(time.Hour)}},
		{wire.OpTokenCreate, wire.TokenCreateReq{TTL: -1}},
		{wire.OpTokenCheck, wire.TokenCheckReq{Token: []byte("not a token")}},
		{wire.OpUserPasswd, wire.UserPasswdReq{Name: "alice", Password: "a long enough one"}},
		{wire.OpUserPasswd, wire.UserPasswdReq{Password: "short"}},
		{wire.OpPasswordCheck, wire.UserPasswdReq{Name: "admin", Password: "guess"}},
		{wire.OpS3KeyCreate, wire.S3KeyReq{Name: "../admin"}},
		{wire.OpS3KeyCreate, wire.S3KeyReq{}},
		{wire.OpS3KeyGet, wire.S3KeyReq{Access: "PK../../user/admin"}},
		{wire.OpTokenCreate, wire.TokenCreateReq{Scopes: []string{"storage.modify:/fz/data"}, Audience: "https://x"}},
		{wire.OpBearerCheck, wire.BearerCheckReq{Token: "eyJhbGciOiJub25lIn0.eyJpc3MiOiJpIn0."}},
		{wire.OpResolve, wire.ResolveReq{Path: "/fz/data", Bearer: "a.b.c"}},
		{wire.OpIssuerTrust, wire.IssuerInfo{Name: "idp", Issuer: "https://idp", Audience: "a", Base: "/fz/data", JWKS: []byte(`{"keys":[]}`)}},
		{wire.OpIssuerList, wire.Empty{}},
		{wire.OpIssuerDistrust, wire.IssuerDistrustReq{Name: "idp"}},
		{wire.OpDomainJWKS, wire.Empty{}},
	} {
		b, err := wire.Marshal(s.msg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint16(s.op), b)
	}
}

func serveFuzzed(t *testing.T, c *Controller, sc *rpc.ServerConn, op uint16, meta []byte) (rpc.Reply, error) {
	if wire.Op(op) == wire.OpMountWatch {
		// A stream on a live connection, which this harness has not: it
		// decodes nothing from the request (TestMountTablePushed runs it).
		return rpc.Reply{}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := c.Serve(ctx, &rpc.Request{Op: wire.Op(op), Meta: meta, Conn: sc})
	if err != nil {
		if _, ok := err.(*wire.Error); !ok {
			t.Fatalf("op %d: error of type %T: %v", op, err, err)
		}
		return rep, err
	}
	if rep.Msg != nil {
		if _, err := wire.Marshal(rep.Msg); err != nil {
			t.Fatalf("op %d: reply does not encode: %v", op, err)
		}
	}
	return rep, nil
}

// FuzzControllerUser: a user with read rights in one mount sends
// arbitrary requests. Every one is answered with a reply or a
// *wire.Error; nothing she sends changes the controller's state (she
// administers nothing) but her own password and S3 keys; and a token she
// is given grants no more than her rights (read and list), is hers, and
// comes from the domain's key.
func FuzzControllerUser(f *testing.F) {
	controllerSeeds(f)
	c := fuzzController(f)
	alice := userConn("alice")
	before := snapshotBut(f, c, "alice")
	f.Fuzz(func(t *testing.T, op uint16, meta []byte) {
		rep, err := serveFuzzed(t, c, alice, op, meta)
		if after := snapshotBut(t, c, "alice"); after != before {
			t.Fatalf("op %s (%v) by alice changed the controller's state:\n%s\n%s", wire.Op(op), err, before, after)
		}
		if err != nil {
			return
		}
		switch wire.Op(op) {
		case wire.OpUserAdd, wire.OpUserRevoke, wire.OpUserList, wire.OpMountAdd, wire.OpMountRemove, wire.OpACLSet, wire.OpShareRegister,
			wire.OpIssuerTrust, wire.OpIssuerList, wire.OpIssuerDistrust, wire.OpBearerCheck:
			t.Fatalf("op %s succeeded for a user who administers nothing", wire.Op(op))
		case wire.OpResolve:
			r := rep.Msg.(wire.ResolveResp)
			if r.Token == nil {
				return
			}
			tok, err := auth.VerifyToken(c.keys.tokenPub, r.Token, time.Now())
			if err != nil {
				t.Fatalf("a token from resolve does not verify: %v", err)
			}
			if tok.Principal != "alice@fz" || tok.Share != "data" {
				t.Fatalf("token for %s at %s", tok.Principal, tok.Share)
			}
			for _, g := range tok.Grants {
				if g.Rights&^(auth.Read|auth.List) != 0 {
					t.Fatalf("token grants %s at %q", g.Rights, g.Path)
				}
				if auth.IsUnder(g.Path, "exp/secret") && g.Rights&auth.Read != 0 {
					t.Fatalf("token grants read at %q, which alice may not read", g.Path)
				}
			}
		}
	})
}

// FuzzControllerAdmin: an administrator sends arbitrary requests. Every
// one is answered with a reply or a *wire.Error, and whatever is
// accepted leaves the state loadable: every ACL parses, every mount is a
// clean path of the domain, every user and share has a valid name.
func FuzzControllerAdmin(f *testing.F) {
	controllerSeeds(f)
	c := fuzzController(f)
	admin := userConn("admin")
	f.Fuzz(func(t *testing.T, op uint16, meta []byte) {
		if _, err := serveFuzzed(t, c, admin, op, meta); err != nil {
			return
		}
		ctx := context.Background()
		if _, err := loadACLs(ctx, c.st); err != nil {
			t.Fatalf("op %s left the ACLs unloadable: %v", wire.Op(op), err)
		}
		mounts, err := loadMounts(ctx, c.st)
		if err != nil {
			t.Fatalf("op %s left the mounts unloadable: %v", wire.Op(op), err)
		}
		for _, m := range mounts {
			if _, err := c.cleanGlobal(m.Prefix, true); err != nil {
				t.Fatalf("mount at %q: %v", m.Prefix, err)
			}
			checkStoredLocations(t, c, m)
		}
		for _, pfx := range []string{pfxUser, pfxShare, pfxIssuer} {
			kvs, err := c.st.List(ctx, pfx)
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range kvs {
				if err := auth.ValidName(strings.TrimPrefix(kv.Key, pfx)); err != nil {
					t.Fatalf("op %s stored %q: %v", wire.Op(op), kv.Key, err)
				}
			}
		}
	})
}

// TestControllerRefusalsChangeNothing: the refusals the fuzz targets
// reach, one of each, leave the state as it was.
func TestControllerRefusalsChangeNothing(t *testing.T) {
	c := fuzzController(t)
	alice := userConn("alice")
	before := snapshot(t, c)
	for _, r := range []struct {
		op  wire.Op
		msg any
	}{
		{wire.OpUserAdd, wire.UserAddReq{Name: "mallory", Groups: []string{"admins"}}},
		{wire.OpACLSet, wire.ACLSetReq{Path: "/fz/data", Entries: []wire.ACLEntry{{Who: "alice", Rights: "all"}}}},
		{wire.OpMountRemove, wire.PathReq{Path: "/fz/data"}},
		{wire.OpMountAdd, wire.MountEntry{Prefix: "/fz/mine", Share: "data"}},
		{wire.OpUserRevoke, wire.UserRevokeReq{Name: "admin"}},
		{wire.OpShareRegister, wire.ShareRegisterReq{Name: "data", Addrs: []string{"10.0.0.1:1"}}},
		{wire.OpIssuerTrust, wire.IssuerInfo{Name: "idp", Issuer: "https://idp.example", Audience: "a", Base: "/fz/data"}},
		{wire.OpIssuerDistrust, wire.IssuerDistrustReq{Name: "idp"}},
	} {
		meta, _ := wire.Marshal(r.msg)
		_, err := c.Serve(context.Background(), &rpc.Request{Op: r.op, Meta: meta, Conn: alice})
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeAccess || !strings.Contains(we.Message, "alice@fz") {
			t.Errorf("%s by alice: %v", r.op, err)
		}
	}
	if after := snapshot(t, c); after != before {
		t.Fatal("refused requests changed the state")
	}
}
