package controller

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// linkedFuzzController is fuzzController with domain "ev" linked
// (admitting all its users, who may read and list /fz/data) and returns
// ev's token key, with which the fuzz signs assertions.
func linkedFuzzController(tb testing.TB) (*Controller, ed25519.PrivateKey) {
	tb.Helper()
	c := fuzzController(tb)
	ctx := context.Background()
	ev, err := auth.NewCA("ev")
	if err != nil {
		tb.Fatal(err)
	}
	pub, priv, err := auth.NewTokenKey()
	if err != nil {
		tb.Fatal(err)
	}
	l := wire.DomainLink{Name: "ev", Controllers: []string{"127.0.0.1:1"}, CA: ev.CertPEM(), TokenKey: pub, Admit: wire.AdmitAll}
	if err := c.storeLink(ctx, l); err != nil {
		tb.Fatal(err)
	}
	if err := put(ctx, c.st, pfxACL+"/fz/data", []wire.ACLEntry{{Who: "alice", Rights: "rl"}, {Who: "anyone@ev", Rights: "rl"}}); err != nil {
		tb.Fatal(err)
	}
	return c, priv
}

// FuzzControllerLinked: a linked domain's user and a stranger domain's
// controller send arbitrary requests (the linked user's resolves with a
// valid assertion of its home domain, so that they reach the token code).
// Every one is answered with a reply or a *wire.Error and changes
// nothing; a token is the linked user's own, of this domain's key, and
// grants no more than read and list.
func FuzzControllerLinked(f *testing.F) {
	controllerSeeds(f)
	f.Add(uint16(wire.OpResolve), []byte{0xa1, 0x01, 0x68, '/', 'f', 'z', '/', 'd', 'a', 't', 'a'})
	f.Add(uint16(wire.OpDomainJoin), []byte{0xa1, 0x01, 0x58, 0x20, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32})
	c, evKey := linkedFuzzController(f)
	mallory := &rpc.ServerConn{State: &peer{id: auth.Identity{Domain: "ev", Role: auth.RoleUser, Name: "mallory"}}}
	stranger := &rpc.ServerConn{State: &peer{id: auth.Identity{Domain: "zz", Role: auth.RoleController, Name: "controller"}, stranger: true}}
	now := time.Now()
	assertion, err := auth.SignToken(evKey, &auth.Token{ID: "a", Principal: "mallory@ev", Groups: []string{"staff"}, Assert: true,
		Audience: "fz", Issued: now, Expires: now.Add(time.Hour)})
	if err != nil {
		f.Fatal(err)
	}
	before := snapshot(f, c)
	f.Fuzz(func(t *testing.T, op uint16, meta []byte) {
		for _, who := range []*rpc.ServerConn{mallory, stranger} {
			m := meta
			if who == mallory && wire.Op(op) == wire.OpResolve {
				var r wire.ResolveReq
				if wire.Unmarshal(meta, &r) == nil {
					r.Assertion = assertion
					m, _ = wire.Marshal(r)
				}
			}
			rep, err := serveFuzzed(t, c, who, op, m)
			if after := snapshot(t, c); after != before {
				t.Fatalf("op %s (%v) by %s changed the controller's state:\n%s\n%s", wire.Op(op), err, who.State.(*peer).id, before, after)
			}
			if err != nil {
				continue
			}
			if who == stranger && wire.Op(op) != wire.OpDomainHello && wire.Op(op) != wire.OpPing && wire.Op(op) != wire.OpMountWatch {
				t.Fatalf("op %s succeeded for a stranger", wire.Op(op))
			}
			if r, ok := rep.Msg.(wire.ResolveResp); ok && r.Token != nil {
				tok, err := auth.VerifyToken(c.keys.tokenPub, r.Token, time.Now())
				if err != nil || tok.Principal != "mallory@ev" {
					t.Fatalf("a token from resolve: %v %+v", err, tok)
				}
				for _, g := range tok.Grants {
					if g.Rights&^(auth.Read|auth.List) != 0 {
						t.Fatalf("token grants %s at %q", g.Rights, g.Path)
					}
				}
			}
		}
	})
}

// FuzzDecodeInvite: an invitation's text comes from another domain. It
// decodes or fails with an error; what decodes is well-formed.
func FuzzDecodeInvite(f *testing.F) {
	b, _ := wire.Marshal(inviteCode{Domain: "tacc", Controllers: []string{"127.0.0.1:7070"}, Fingerprint: strings.Repeat("ab", 32), Secret: make([]byte, 32)})
	f.Add(invitePrefix + base64.RawURLEncoding.EncodeToString(b))
	f.Add(invitePrefix)
	f.Add("pando-invite.oWR0YWNj")
	f.Fuzz(func(t *testing.T, s string) {
		dom, addrs, fp, secret, err := DecodeInvite(s)
		if err != nil {
			return
		}
		if auth.ValidName(dom) != nil || len(addrs) == 0 || len(addrs) > 16 || len(fp) != 64 || len(secret) != 32 {
			t.Fatalf("decoded a malformed invitation: %q %v %q %d", dom, addrs, fp, len(secret))
		}
	})
}

// TestLinkedRefusalsChangeNothing: a linked domain's user and a stranger,
// refused, leave the state as it was.
func TestLinkedRefusalsChangeNothing(t *testing.T) {
	c, _ := linkedFuzzController(t)
	mallory := &rpc.ServerConn{State: &peer{id: auth.Identity{Domain: "ev", Role: auth.RoleUser, Name: "mallory"}}}
	stranger := &rpc.ServerConn{State: &peer{id: auth.Identity{Domain: "zz", Role: auth.RoleController, Name: "controller"}, stranger: true}}
	before := snapshot(t, c)
	for _, r := range []struct {
		who  *rpc.ServerConn
		op   wire.Op
		msg  any
		want string
	}{
		{mallory, wire.OpACLSet, wire.ACLSetReq{Path: "/fz/data", Entries: []wire.ACLEntry{{Who: "anyone@ev", Rights: "all"}}}, "principal of linked domain ev"},
		{mallory, wire.OpDomainUnlink, wire.DomainNameReq{Name: "ev"}, "principal of linked domain ev"},
		{mallory, wire.OpResolve, wire.ResolveReq{Path: "/fz/data"}, "assertion"},
		{mallory, wire.OpDomainAssert, wire.DomainAssertReq{Domain: "ev"}, "principal of linked domain ev"},
		{stranger, wire.OpResolve, wire.ResolveReq{Path: "/fz/data"}, "not linked"},
		{stranger, wire.OpDomainJoin, wire.DomainJoinReq{Secret: make([]byte, 32)}, "no such invitation"},
	} {
		meta, _ := wire.Marshal(r.msg)
		_, err := serveFuzzed(t, c, r.who, uint16(r.op), meta)
		if err == nil || !strings.Contains(err.Error(), r.want) {
			t.Errorf("%s by %s: %v, want a refusal saying %q", r.op, r.who.State.(*peer).id, err, r.want)
		}
	}
	if after := snapshot(t, c); after != before {
		t.Fatalf("refusals changed the state:\n%s\n%s", before, after)
	}
}
