package controller

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"pando.dev/pando/internal/audit"
	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/store"
	"pando.dev/pando/internal/wire"
)

func (c *Controller) resolve(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.ResolveReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	g, err := c.cleanGlobal(r.Path, false)
	if err != nil {
		return rpc.Reply{}, err
	}
	// A gateway presenting a JWT: the principal and its scopes come from
	// the JWT, verified here again (bearer.go).
	b, err := c.resolveBearer(ctx, p, &r)
	if err != nil {
		return rpc.Reply{}, err
	}
	// Everything a token is made from, read together in one request to
	// the store: the record of the user it names (the caller, or the user
	// a gateway asks for), the mounts, the shares and the ACLs.
	remote := p.id.Domain != c.keys.domain
	// Another issuer's JWT names no record of this domain: its principal
	// and rights come from the JWT alone.
	foreign := b != nil && b.user == ""
	key := pfxUser
	if remote {
		key = pfxLink + p.id.Domain
	} else if !foreign {
		who, err := c.recordFor(p, r.For)
		if err != nil {
			return rpc.Reply{}, err
		}
		key = pfxUser + who
	}
	m, err := store.ReadMany(ctx, c.st, []string{key}, []string{pfxMount, pfxShare, pfxACL})
	if err != nil {
		return rpc.Reply{}, err
	}
	var subj auth.Subject
	var principal string
	var until time.Time // a linked domain's principal: its assertion's end
	if remote {
		var l *wire.DomainLink
		if v := m.Values[key]; v != nil {
			l = new(wire.DomainLink)
			if err := wire.Unmarshal(v, l); err != nil {
				return rpc.Reply{}, fmt.Errorf("state record %s is damaged: %w", key, err)
			}
		}
		subj, principal, until, err = c.remoteSubject(p, l, &r, g)
	} else if foreign {
		principal = b.principal
	} else {
		subj, principal, err = c.resolveSubjectOf(p, r.For, m.Values[key])
	}
	if err != nil {
		return rpc.Reply{}, err
	}
	mounts, err := parseMounts(m.Lists[pfxMount])
	if err == nil {
		mounts, err = c.filterMounts(ctx, p, mounts)
	}
	if err != nil {
		return rpc.Reply{}, err
	}
	shares := map[string][]byte{}
	for _, kv := range m.Lists[pfxShare] {
		shares[kv.Key] = kv.Value
	}
	var best *wire.MountEntry
	var children []string
	for i := range mounts {
		m := &mounts[i]
		if under(g, m.Prefix) && (best == nil || len(m.Prefix) > len(best.Prefix)) {
			best = m
		}
		if m.Prefix != g && under(m.Prefix, g) {
			children = append(children, strings.SplitN(strings.TrimPrefix(strings.TrimPrefix(m.Prefix, g), "/"), "/", 2)[0])
		}
	}
	if best == nil {
		if len(children) == 0 && g != "/" && g != "/"+c.keys.domain {
			return rpc.Reply{}, wire.Errorf(wire.CodeNotExist, "%s: no share is mounted there (see `pando ns ls`)", g)
		}
		slices.Sort(children)
		return rpc.Reply{Msg: wire.ResolveResp{Children: slices.Compact(children)}}, nil
	}
	var sh shareRec
	if v, ok := shares[pfxShare+best.Share]; !ok || wire.Unmarshal(v, &sh) != nil {
		return rpc.Reply{}, wire.Errorf(wire.CodeNotRegistered, "%s is mounted from share %s, which is not registered", best.Prefix, best.Share)
	}
	acls, err := parseACLs(m.Lists[pfxACL])
	if err != nil {
		return rpc.Reply{}, err
	}
	now := time.Now()
	t := &auth.Token{
		ID: newID(), Principal: principal, Share: best.Share, Root: best.SharePath,
		Issued: now, Expires: now.Add(c.cfg.TokenTTL),
	}
	if remote {
		if until.Before(t.Expires) {
			t.Expires = until
		}
		for _, g := range subj.Groups {
			t.Groups = append(t.Groups, g+"@"+subj.Domain)
		}
	}
	if r.For != "" || b != nil {
		t.Proxy = p.id.String() // the gateway presents the user's token
	} else if r.Proxy != "" {
		proxy, err := c.proxyShare(ctx, p, r.Proxy, shares)
		if err != nil {
			return rpc.Reply{}, err
		}
		t.Proxy = proxy
	}
	rights := func(q string) auth.Rights { return auth.Effective(acls, subj, q) }
	points := slices.Collect(maps.Keys(acls))
	if b != nil {
		if b.expires.Before(t.Expires) {
			t.Expires = b.expires
		}
		rights = b.rights(acls, subj)
		t.Scopes = auth.ScopeClaim(b.scopes)
		for _, s := range b.scopes {
			points = append(points, s.Path)
		}
	}
	t.Grants = append(t.Grants, auth.Grant{Path: best.SharePath, Rights: rights(best.Prefix)})
	slices.Sort(points)
	for _, q := range slices.Compact(points) {
		if q != best.Prefix && under(q, best.Prefix) {
			rel := strings.Trim(path.Join(best.SharePath, strings.TrimPrefix(q, best.Prefix)), "/")
			t.Grants = append(t.Grants, auth.Grant{Path: rel, Rights: rights(q)})
		}
	}
	signed, err := auth.SignToken(c.keys.tokenKey, t)
	if err != nil {
		return rpc.Reply{}, err
	}
	detail := fmt.Sprintf("token for share %s below /%s, %d grants, until %s", t.Share, t.Root, len(t.Grants), t.Expires.UTC().Format(time.RFC3339))
	if t.Proxy != "" {
		detail += ", presented by " + t.Proxy
	}
	c.audit.Write(audit.Record{Who: principal, Action: req.Op.String(), Path: best.Prefix, Rights: t.Grants[0].Rights.String(),
		Result: audit.Granted, From: req.Conn.From(), Detail: detail})
	return rpc.Reply{Msg: wire.ResolveResp{
		Prefix: best.Prefix, Share: best.Share, SharePath: best.SharePath, Addrs: sh.Addrs,
		Token: signed, Expires: t.Expires.UnixNano(),
	}}, nil
}

// proxyShare names the share that may present a token on its caller's
// behalf (a third-party copy's source): a share of this domain ("data"),
// or ("data@tacc") a share of a linked domain, for this domain's users,
// or of the caller's own domain, for a linked domain's.
func (c *Controller) proxyShare(ctx context.Context, p *peer, proxy string, shares map[string][]byte) (string, error) {
	name, dom, qualified := strings.Cut(proxy, "@")
	if !qualified || dom == c.keys.domain {
		if _, ok := shares[pfxShare+name]; !ok {
			return "", wire.Errorf(wire.CodeNotRegistered, "share %s, named to act on your behalf, is not registered", name)
		}
		return auth.Identity{Domain: c.keys.domain, Role: auth.RoleShare, Name: name}.String(), nil
	}
	if auth.ValidName(name) != nil || auth.ValidName(dom) != nil {
		return "", wire.Errorf(wire.CodeInvalid, "%q is not a share name like data or data@tacc", proxy)
	}
	if p.id.Domain != c.keys.domain {
		if dom != p.id.Domain {
			return "", wire.Errorf(wire.CodeAccess, "%s may name to act on its behalf a share of %s or of its own domain, not of %s", p.id, c.keys.domain, dom)
		}
	} else if l, err := c.linkOf(ctx, dom); err != nil {
		return "", err
	} else if l == nil {
		return "", wire.Errorf(wire.CodeAccess, "share %s is of domain %s, which %s has not linked", name, dom, c.keys.domain)
	}
	return auth.Identity{Domain: dom, Role: auth.RoleShare, Name: name}.String(), nil
}
