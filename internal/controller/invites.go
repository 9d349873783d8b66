package controller

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/store"
	"pando.dev/pando/internal/wire"
)

// Invitations: a one-time code with which another domain links with this
// one (pando domain invite, pando domain join; docs/federation.md).

// inviteRec is an invitation not yet redeemed (Used 0) or redeemed.
type inviteRec struct {
	Name    string   `cbor:"1,keyasint"`
	Admit   string   `cbor:"2,keyasint"`
	Groups  []string `cbor:"3,keyasint,omitempty"`
	Prefix  string   `cbor:"4,keyasint,omitempty"`
	Expires int64    `cbor:"5,keyasint"`
	By      string   `cbor:"6,keyasint,omitempty"`
	Used    int64    `cbor:"7,keyasint,omitempty"`
}

// inviteCode is what an invitation's text carries.
type inviteCode struct {
	Domain      string   `cbor:"1,keyasint"`
	Controllers []string `cbor:"2,keyasint"`
	Fingerprint string   `cbor:"3,keyasint"`
	Secret      []byte   `cbor:"4,keyasint"`
}

// DecodeInvite reads an invitation's text (pando domain invite prints
// one). It checks the form only: the inviting controller checks the rest.
func DecodeInvite(s string) (domain string, controllers []string, fingerprint string, secret []byte, err error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), invitePrefix)
	if !ok || len(rest) > 4096 {
		return "", nil, "", nil, errors.New("that is not an invitation code (pando domain invite prints one, starting " + invitePrefix + ")")
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	var ic inviteCode
	if err == nil {
		err = wire.Unmarshal(b, &ic)
	}
	if err != nil {
		return "", nil, "", nil, fmt.Errorf("the invitation code is damaged (copy it whole): %w", err)
	}
	if auth.ValidName(ic.Domain) != nil || len(ic.Controllers) == 0 || len(ic.Controllers) > 16 || len(ic.Secret) != 32 {
		return "", nil, "", nil, errors.New("the invitation code is damaged (copy it whole)")
	}
	fp, err := auth.NormFingerprint(ic.Fingerprint)
	if err != nil {
		return "", nil, "", nil, fmt.Errorf("the invitation code is damaged: %w", err)
	}
	return ic.Domain, ic.Controllers, fp, ic.Secret, nil
}

func inviteKey(secret []byte) string {
	h := sha256.Sum256(secret)
	return pfxInvite + hex.EncodeToString(h[:])
}

// domainInvite makes a one-time invitation for domain Name (administrators).
func (c *Controller) domainInvite(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.DomainInviteReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if _, err := c.require(ctx, p, "/", auth.Admin); err != nil {
		return rpc.Reply{}, err
	}
	l := wire.DomainLink{Name: r.Name, Admit: r.Admit, Groups: r.Groups, Prefix: r.Prefix}
	if err := c.checkLinkReq(&l); err != nil {
		return rpc.Reply{}, err
	}
	ttl := time.Duration(r.TTL)
	switch {
	case ttl == 0:
		ttl = inviteDefault
	case ttl < time.Second || ttl > inviteMax:
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "an invitation lives from 1s to %s; ask for a --ttl in between", inviteMax)
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return rpc.Reply{}, err
	}
	exp := time.Now().Add(ttl)
	if err := put(ctx, c.st, inviteKey(secret), inviteRec{Name: l.Name, Admit: l.Admit, Groups: l.Groups, Prefix: l.Prefix,
		Expires: exp.UnixNano(), By: p.id.String()}); err != nil {
		return rpc.Reply{}, err
	}
	b, err := wire.Marshal(inviteCode{Domain: c.keys.domain, Controllers: c.Controllers(ctx), Fingerprint: c.fingerprint(), Secret: secret})
	if err != nil {
		return rpc.Reply{}, err
	}
	return rpc.Reply{Msg: wire.DomainInviteResp{Code: invitePrefix + base64.RawURLEncoding.EncodeToString(b), Expires: exp.UnixNano()}}, nil
}

// domainJoin redeems an invitation, for the invited domain's controller.
func (c *Controller) domainJoin(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.DomainJoinReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if p.id.Role != auth.RoleController || p.id.Domain == c.keys.domain {
		return rpc.Reply{}, wire.Errorf(wire.CodeAccess, "%s is not another domain's controller: only one redeems an invitation", p.id)
	}
	if len(r.Secret) != 32 {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "the invitation is damaged")
	}
	key := inviteKey(r.Secret)
	old, err := c.st.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return rpc.Reply{}, wire.Errorf(wire.CodeAccess, "domain %s issued no such invitation; ask its administrator for one (pando domain invite)", c.keys.domain)
	} else if err != nil {
		return rpc.Reply{}, err
	}
	var inv inviteRec
	if err := wire.Unmarshal(old, &inv); err != nil {
		return rpc.Reply{}, fmt.Errorf("state record %s is damaged: %w", key, err)
	}
	now := time.Now()
	switch {
	case inv.Used != 0:
		return rpc.Reply{}, wire.Errorf(wire.CodeAccess, "this invitation of domain %s was used at %s; an invitation serves once: ask for a new one (pando domain invite)",
			c.keys.domain, time.Unix(0, inv.Used).UTC().Format(time.RFC3339))
	case now.UnixNano() >= inv.Expires:
		return rpc.Reply{}, wire.Errorf(wire.CodeAccess, "this invitation of domain %s expired at %s; ask for a new one (pando domain invite)",
			c.keys.domain, time.Unix(0, inv.Expires).UTC().Format(time.RFC3339))
	case inv.Name != p.id.Domain || r.Hello.Domain != p.id.Domain:
		return rpc.Reply{}, wire.Errorf(wire.CodeAccess, "this invitation of domain %s is for domain %s, not %s", c.keys.domain, inv.Name, p.id.Domain)
	}
	if len(r.Hello.TokenKey) != ed25519.PublicKeySize || len(r.Hello.Controllers) == 0 || len(r.Hello.Controllers) > 16 {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "the joining domain's hello is incomplete")
	}
	if id, err := verifyChain(p.chain, r.Hello.CA, p.id.Domain); err != nil || id.Role != auth.RoleController {
		return rpc.Reply{}, wire.Errorf(wire.CodeAccess, "the caller's certificate was not issued by the CA that domain %s sent: %v", p.id.Domain, err)
	}
	inv.Used = now.UnixNano()
	val, err := wire.Marshal(inv)
	if err != nil {
		return rpc.Reply{}, err
	}
	if err := c.st.CompareAndSwap(ctx, key, old, val); err != nil {
		return rpc.Reply{}, wire.Errorf(wire.CodeAccess, "this invitation of domain %s was just used; ask for a new one (pando domain invite)", c.keys.domain)
	}
	l := wire.DomainLink{Name: inv.Name, Controllers: r.Hello.Controllers, CA: r.Hello.CA, TokenKey: r.Hello.TokenKey,
		Admit: inv.Admit, Groups: inv.Groups, Prefix: inv.Prefix, Created: now.UnixNano(), By: inv.By + " (invitation)", LastContact: now.UnixNano()}
	if err := c.storeLink(ctx, l); err != nil {
		return rpc.Reply{}, err
	}
	c.log.Info("domain linked by invitation", "domain", l.Name, "admit", l.Admit)
	return rpc.Reply{Msg: c.hello(ctx)}, nil
}
