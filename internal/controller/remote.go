package controller

import (
	"context"
	"crypto/ed25519"
	"slices"
	"strings"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// A linked domain's principals: the group assertions a domain signs for
// its own, and what this domain lets another's ask and reach.

// domainAssert signs a group assertion of the caller (or of the user a
// gateway names) for a linked domain.
func (c *Controller) domainAssert(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.DomainAssertReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if p.id.Domain != c.keys.domain {
		return rpc.Reply{}, wire.Errorf(wire.CodeAccess, "%s is not of domain %s, which vouches only for its own", p.id, c.keys.domain)
	}
	l, err := c.linkOf(ctx, r.Domain)
	if err != nil {
		return rpc.Reply{}, err
	}
	if l == nil {
		return rpc.Reply{}, wire.Errorf(wire.CodeNotExist, "domain %s is not linked with %s (see pando domain ls)", r.Domain, c.keys.domain)
	}
	who, err := c.recordFor(p, r.For)
	if err != nil {
		return rpc.Reply{}, err
	}
	u, err := c.liveUser(ctx, who)
	if err != nil {
		return rpc.Reply{}, err
	}
	now := time.Now()
	t := &auth.Token{ID: newID(), Principal: who + "@" + c.keys.domain, Groups: u.Groups, Assert: true, Audience: r.Domain,
		Issued: now, Expires: now.Add(min(c.cfg.TokenTTL, assertMax))}
	if r.For != "" {
		t.Proxy = p.id.String()
	}
	signed, err := auth.SignToken(c.keys.tokenKey, t)
	if err != nil {
		return rpc.Reply{}, err
	}
	return rpc.Reply{Msg: wire.DomainAssertResp{Assertion: signed, Expires: t.Expires.UnixNano()}}, nil
}

// remoteSubject decides who a linked domain's principal asking for a token
// is, from its home domain's assertion and this domain's link: the
// subject, the principal the token names, and when the token must end.
func (c *Controller) remoteSubject(p *peer, l *wire.DomainLink, r *wire.ResolveReq, g string) (auth.Subject, string, time.Time, error) {
	dom := p.id.Domain
	if l == nil {
		return auth.Subject{}, "", time.Time{}, wire.Errorf(wire.CodeTokenRevoked, "domain %s is not linked with %s (any more); %s is served here no more", dom, c.keys.domain, p.id)
	}
	if l.Admit == wire.AdmitNone {
		return auth.Subject{}, "", time.Time{}, wire.Errorf(wire.CodeAccess, "domain %s admits no principal of %s (its link says --admit none); domain %s decided", c.keys.domain, dom, c.keys.domain)
	}
	t, err := auth.VerifyToken(ed25519.PublicKey(l.TokenKey), r.Assertion, time.Now())
	if err != nil {
		return auth.Subject{}, "", time.Time{}, wire.Errorf(wire.CodeTokenInvalid, "the assertion %s sent from domain %s was refused: %v", p.id, dom, err)
	}
	want := p.id.String()
	proxy := ""
	if p.id.Role == auth.RoleGateway {
		if r.For == "" || auth.ValidName(r.For) != nil {
			return auth.Subject{}, "", time.Time{}, wire.Errorf(wire.CodeAccess, "%s is a gateway and has no rights of its own; it asks in the name of the users it serves", p.id)
		}
		want, proxy = r.For+"@"+dom, p.id.String()
	} else if r.For != "" {
		return auth.Subject{}, "", time.Time{}, wire.Errorf(wire.CodeAccess, "%s asked for a token in the name of %s, which only a gateway may do", p.id, r.For)
	}
	if !t.Assert || t.Audience != c.keys.domain || t.Principal != want || t.Proxy != proxy {
		return auth.Subject{}, "", time.Time{}, wire.Errorf(wire.CodeTokenInvalid, "the assertion %s sent from domain %s is not one for %s at %s", p.id, dom, want, c.keys.domain)
	}
	if l.Admit == wire.AdmitGroups && !slices.ContainsFunc(t.Groups, func(g string) bool { return slices.Contains(l.Groups, g) }) {
		return auth.Subject{}, "", time.Time{}, wire.Errorf(wire.CodeAccess, "domain %s admits of %s only the groups %s, and %s is in none of them; domain %s decided",
			c.keys.domain, dom, strings.Join(l.Groups, ", "), want, c.keys.domain)
	}
	if l.Prefix != "" && !under(g, l.Prefix) && !under(l.Prefix, g) {
		return auth.Subject{}, "", time.Time{}, wire.Errorf(wire.CodeAccess, "domain %s lets principals of %s reach only %s, and %s is outside it; domain %s decided",
			c.keys.domain, dom, l.Prefix, g, c.keys.domain)
	}
	name, _, _ := strings.Cut(want, "@")
	return auth.Subject{User: name, Groups: t.Groups, Domain: dom}, want, t.Expires, nil
}

// filterMounts keeps, for a linked domain's principal, the mounts its link
// lets it reach.
func (c *Controller) filterMounts(ctx context.Context, p *peer, ms []wire.MountEntry) ([]wire.MountEntry, error) {
	if p.id.Domain == c.keys.domain {
		return ms, nil
	}
	l, err := c.linkOf(ctx, p.id.Domain)
	if err != nil {
		return nil, err
	}
	if l == nil || l.Admit == wire.AdmitNone {
		_, _, _, err := c.remoteSubject(p, l, &wire.ResolveReq{}, "/")
		return nil, err
	}
	if l.Prefix == "" {
		return ms, nil
	}
	return slices.DeleteFunc(ms, func(m wire.MountEntry) bool { return !under(m.Prefix, l.Prefix) && !under(l.Prefix, m.Prefix) }), nil
}

// remoteOps are what a linked domain's principal may ask.
func remoteOp(op wire.Op) bool {
	switch op {
	case wire.OpPing, wire.OpWhoAmI, wire.OpMountList, wire.OpMountWatch, wire.OpResolve, wire.OpDomainHello, wire.OpDomainJoin:
		return true
	}
	return false
}
