package controller

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/store"
	"pando.dev/pando/internal/wire"
)

// Serve dispatches one controller request, and records its outcome in the
// audit log (see audited).
func (c *Controller) Serve(ctx context.Context, req *rpc.Request) (rpc.Reply, error) {
	p := req.Conn.State.(*peer)
	rep, err := c.serve(ctx, p, req)
	c.audited(p, req, err)
	return rep, err
}

func (c *Controller) serve(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	if p.stranger && req.Op != wire.OpPing && req.Op != wire.OpDomainHello && req.Op != wire.OpDomainJoin {
		return rpc.Reply{}, wire.Errorf(wire.CodeTokenInvalid, "domain %s is not linked with %s, whose controller serves it nothing but its hello; its administrator links it with pando domain link %s or joins an invitation",
			p.id.Domain, c.keys.domain, p.id.Domain)
	}
	if p.id.Domain != c.keys.domain && !p.stranger && !remoteOp(req.Op) {
		return rpc.Reply{}, wire.Errorf(wire.CodeAccess, "%s is a principal of linked domain %s: the controller of %s serves it only tokens and the mount table, not %s requests",
			p.id, p.id.Domain, c.keys.domain, req.Op)
	}
	switch req.Op {
	case wire.OpPing:
		return rpc.Reply{}, nil
	case wire.OpStatus:
		return c.status(ctx, p)
	case wire.OpWhoAmI:
		return c.whoami(ctx, p)
	case wire.OpResolve:
		return c.resolve(ctx, p, req)
	case wire.OpMountList:
		m, err := loadMounts(ctx, c.st)
		if err == nil {
			m, err = c.filterMounts(ctx, p, m)
		}
		return rpc.Reply{Msg: wire.MountListResp{Domain: c.keys.domain, Entries: m, Controllers: c.Controllers(ctx)}}, err
	case wire.OpMountAdd:
		return c.mountAdd(ctx, p, req)
	case wire.OpMountRemove:
		return c.mountRemove(ctx, p, req)
	case wire.OpShareRegister:
		return c.shareRegister(ctx, p, req)
	case wire.OpShareList:
		return c.shareList(ctx)
	case wire.OpUserAdd:
		return c.userAdd(ctx, p, req)
	case wire.OpUserList:
		return c.userList(ctx, p)
	case wire.OpUserRevoke:
		return c.userRevoke(ctx, p, req)
	case wire.OpACLGet:
		return c.aclGet(ctx, p, req)
	case wire.OpACLSet:
		return c.aclSet(ctx, p, req)
	case wire.OpWatch:
		return c.watch(ctx, p, req)
	case wire.OpMountWatch:
		return c.mountWatch(ctx, p, req)
	case wire.OpTokenCreate:
		return c.tokenCreate(ctx, p, req)
	case wire.OpTokenCheck:
		return c.tokenCheck(ctx, p, req)
	case wire.OpUserPasswd:
		return c.userPasswd(ctx, p, req)
	case wire.OpPasswordCheck:
		return c.passwordCheck(ctx, p, req)
	case wire.OpS3KeyCreate:
		return c.s3KeyCreate(ctx, p, req)
	case wire.OpS3KeyGet:
		return c.s3KeyGet(ctx, p, req)
	case wire.OpDomainHello:
		return rpc.Reply{Msg: c.hello(ctx)}, nil
	case wire.OpDomainLink:
		return c.domainLink(ctx, p, req)
	case wire.OpDomainUnlink:
		return c.domainUnlink(ctx, p, req)
	case wire.OpDomainList:
		return c.domainList(ctx, p, req)
	case wire.OpDomainInvite:
		return c.domainInvite(ctx, p, req)
	case wire.OpDomainJoin:
		return c.domainJoin(ctx, p, req)
	case wire.OpDomainAssert:
		return c.domainAssert(ctx, p, req)
	case wire.OpCertRenew:
		return c.certRenew(ctx, p, req)
	case wire.OpBearerCheck:
		return c.bearerCheck(ctx, p, req)
	case wire.OpIssuerTrust:
		return c.issuerTrust(ctx, p, req)
	case wire.OpIssuerList:
		return c.issuerList(ctx, p)
	case wire.OpIssuerDistrust:
		return c.issuerDistrust(ctx, p, req)
	case wire.OpDomainJWKS:
		return c.domainJWKS()
	}
	return rpc.Reply{}, wire.Errorf(wire.CodeUnknownOp, "the controller does not serve %s requests", req.Op)
}

func (c *Controller) subject(ctx context.Context, p *peer) (auth.Subject, error) {
	v, err := c.st.Get(ctx, pfxUser+p.id.Name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return auth.Subject{}, err
	}
	return c.subjectOf(p, v)
}

// subjectOf is the subject of p whose user record is v (nil: none).
func (c *Controller) subjectOf(p *peer, v []byte) (auth.Subject, error) {
	if p.id.Role != auth.RoleUser {
		return auth.Subject{}, wire.Errorf(wire.CodeAccess, "%s is not a user", p.id)
	}
	var u userRec
	if v == nil || wire.Unmarshal(v, &u) != nil {
		return auth.Subject{}, wire.Errorf(wire.CodeNotRegistered, "user %s is not known to the controller", p.id)
	}
	if u.Revoked != 0 {
		return auth.Subject{}, wire.Errorf(wire.CodeTokenRevoked, "the credentials of %s have been revoked", p.id)
	}
	return auth.Subject{User: u.Name, Groups: u.Groups}, nil
}

// resolveSubject is whose rights a token asked for carries, and the
// principal it names: the caller's own, or, for a gateway naming a user
// in forUser, that user's (a gateway has no rights of its own).
func (c *Controller) resolveSubject(ctx context.Context, p *peer, forUser string) (auth.Subject, string, error) {
	who, err := c.recordFor(p, forUser)
	if err != nil {
		return auth.Subject{}, "", err
	}
	v, err := c.st.Get(ctx, pfxUser+who)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return auth.Subject{}, "", err
	}
	return c.resolveSubjectOf(p, forUser, v)
}

// recordFor checks who may ask in whose name, and returns the user whose
// record decides: the caller's, or forUser's for a gateway.
func (c *Controller) recordFor(p *peer, forUser string) (string, error) {
	if forUser == "" {
		if p.id.Role == auth.RoleGateway {
			return "", wire.Errorf(wire.CodeAccess, "%s is a gateway and has no rights of its own; it asks for tokens in the name of the users it serves", p.id)
		}
		return p.id.Name, nil
	}
	if p.id.Role != auth.RoleGateway {
		return "", wire.Errorf(wire.CodeAccess, "%s asked for a token in the name of %s, which only a gateway may do", p.id, forUser)
	}
	if err := auth.ValidName(forUser); err != nil {
		return "", wire.Errorf(wire.CodeInvalid, "user name: %v", err)
	}
	return forUser, nil
}

// resolveSubjectOf is resolveSubject with the deciding user record v
// (nil: none) already read.
func (c *Controller) resolveSubjectOf(p *peer, forUser string, v []byte) (auth.Subject, string, error) {
	if forUser == "" {
		s, err := c.subjectOf(p, v)
		return s, p.id.String(), err
	}
	u, err := c.liveRecord(forUser, v)
	if err != nil {
		return auth.Subject{}, "", err
	}
	return auth.Subject{User: u.Name, Groups: u.Groups}, forUser + "@" + c.keys.domain, nil
}

// require checks that the caller holds need on the global path g. The
// caller's record and the ACLs are read together, in one request to the
// store.
func (c *Controller) require(ctx context.Context, p *peer, g string, need auth.Rights) (auth.Subject, error) {
	m, err := store.ReadMany(ctx, c.st, []string{pfxUser + p.id.Name}, []string{pfxACL})
	if err != nil {
		return auth.Subject{}, err
	}
	s, err := c.subjectOf(p, m.Values[pfxUser+p.id.Name])
	if err != nil {
		return s, err
	}
	acls, err := parseACLs(m.Lists[pfxACL])
	if err != nil {
		return s, err
	}
	have := auth.Effective(acls, s, g)
	if !have.Has(need) {
		missing := need &^ have
		return s, &wire.Error{Code: wire.CodeAccess, Missing: missing.String(),
			Message: fmt.Sprintf("%s lacks the %s right (%s) on %s; ask an administrator of the domain", p.id, missing.Describe(), missing, g)}
	}
	return s, nil
}

func (c *Controller) whoami(ctx context.Context, p *peer) (rpc.Reply, error) {
	r := wire.WhoAmIResp{Principal: p.id.String(), Domain: c.keys.domain}
	if p.id.Role == auth.RoleUser && p.id.Domain == c.keys.domain {
		s, err := c.subject(ctx, p)
		if err != nil {
			return rpc.Reply{}, err
		}
		r.Groups = s.Groups
	}
	r.Now = time.Now().UnixNano()
	return rpc.Reply{Msg: r}, nil
}

// cleanGlobal validates a global path of this domain.
func (c *Controller) cleanGlobal(p string, mountable bool) (string, error) {
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p {
		return "", wire.Errorf(wire.CodeInvalid, "%q is not a clean global path like /%s/data", p, c.keys.domain)
	}
	dom := "/" + c.keys.domain
	if mountable && !strings.HasPrefix(p, dom+"/") {
		return "", wire.Errorf(wire.CodeInvalid, "mounts live below /%s/ (for example /%s/data), not at %s", c.keys.domain, c.keys.domain, p)
	}
	if !mountable && p != "/" && p != dom && !strings.HasPrefix(p, dom+"/") {
		return "", wire.Errorf(wire.CodeInvalid, "%s is not in domain %s", p, c.keys.domain)
	}
	return p, nil
}

func under(p, prefix string) bool {
	return p == prefix || prefix == "/" || strings.HasPrefix(p, prefix+"/")
}

func (c *Controller) shareRegister(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.ShareRegisterReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if err := auth.ValidName(r.Name); err != nil {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "share name: %v", err)
	}
	self := p.id.Role == auth.RoleShare && p.id.Name == r.Name
	if !self {
		if _, err := c.require(ctx, p, "/", auth.Admin); err != nil {
			return rpc.Reply{}, err
		}
	}
	rec, err := get[shareRec](ctx, c.st, pfxShare+r.Name)
	if errors.Is(err, store.ErrNotFound) {
		rec = &shareRec{Name: r.Name, Registered: time.Now().UnixNano()}
	} else if err != nil {
		return rpc.Reply{}, err
	}
	resp := wire.ShareRegisterResp{CA: c.keys.ca.CertPEM(), TokenKey: c.keys.tokenPub, Domain: c.keys.domain}
	if len(r.CSR) > 0 {
		id := auth.Identity{Domain: c.keys.domain, Role: auth.RoleShare, Name: r.Name}
		var hosts []string
		for _, a := range r.Addrs {
			if h, _, err := splitHost(a); err == nil {
				hosts = append(hosts, h)
			}
		}
		cert, serial, err := c.keys.ca.IssueCSR(id, r.CSR, 365*24*time.Hour, hosts)
		if err != nil {
			return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "cannot issue the share's certificate: %v", err)
		}
		resp.Cert = cert
		rec.Serials = append(rec.Serials, serial)
	} else if !self {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "registering a new share needs a certificate request")
	}
	if len(r.Addrs) > 0 {
		rec.Addrs = r.Addrs
	}
	rec.LastSeen = time.Now().UnixNano()
	if err := put(ctx, c.st, pfxShare+r.Name, rec); err != nil {
		return rpc.Reply{}, err
	}
	c.log.Info("share registered", "share", r.Name, "addrs", r.Addrs)
	return rpc.Reply{Msg: resp}, nil
}

func (c *Controller) shareList(ctx context.Context) (rpc.Reply, error) {
	shares, err := c.shareInfos(ctx)
	if err != nil {
		return rpc.Reply{}, err
	}
	return rpc.Reply{Msg: wire.ShareListResp{Shares: shares}}, nil
}

// shareInfos lists the registered shares, each online if it watches any
// controller of the domain.
func (c *Controller) shareInfos(ctx context.Context) ([]wire.ShareInfo, error) {
	kvs, err := c.st.List(ctx, pfxShare)
	if err != nil {
		return nil, err
	}
	var out []wire.ShareInfo
	for _, kv := range kvs {
		var rec shareRec
		if err := wire.Unmarshal(kv.Value, &rec); err != nil {
			return nil, err
		}
		out = append(out, wire.ShareInfo{Name: rec.Name, Addrs: rec.Addrs, Online: c.shareOnline(ctx, rec.Name), LastSeen: rec.LastSeen})
	}
	return out, nil
}

func fromACL(acl auth.ACL) []wire.ACLEntry {
	out := make([]wire.ACLEntry, 0, len(acl))
	for _, e := range acl {
		out = append(out, wire.ACLEntry{Who: e.Who, Rights: e.Rights.String(), Negative: e.Negative})
	}
	return out
}

func (c *Controller) aclGet(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.ACLGetReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	g, err := c.cleanGlobal(r.Path, false)
	if err != nil {
		return rpc.Reply{}, err
	}
	subj, who, err := c.resolveSubject(ctx, p, r.For)
	if err != nil {
		return rpc.Reply{}, err
	}
	acls, err := loadACLs(ctx, c.st)
	if err != nil {
		return rpc.Reply{}, err
	}
	if have := auth.Effective(acls, subj, g); !have.Has(auth.List) {
		missing := auth.List &^ have
		return rpc.Reply{}, &wire.Error{Code: wire.CodeAccess, Missing: missing.String(),
			Message: fmt.Sprintf("%s lacks the %s right (%s) on %s; ask an administrator of the domain", who, missing.Describe(), missing, g)}
	}
	resp := wire.ACLResp{Path: g, Entries: fromACL(acls[g]), Effective: auth.Effective(acls, subj, g).String()}
	for q, acl := range acls {
		if q != g && under(g, q) {
			if resp.Inherited == nil {
				resp.Inherited = make(map[string][]wire.ACLEntry)
			}
			resp.Inherited[q] = fromACL(acl)
		}
	}
	return rpc.Reply{Msg: resp}, nil
}

func (c *Controller) aclSet(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.ACLSetReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	g, err := c.cleanGlobal(r.Path, false)
	if err != nil {
		return rpc.Reply{}, err
	}
	if _, err := c.require(ctx, p, g, auth.Admin); err != nil {
		return rpc.Reply{}, err
	}
	for i, e := range r.Entries {
		// An entry naming the home domain is its plain form: alice@uva at
		// uva is alice.
		if n, ok := strings.CutSuffix(e.Who, "@"+c.keys.domain); ok {
			r.Entries[i].Who = n
		}
	}
	if _, err := toACL(r.Entries); err != nil {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "%v", err)
	}
	for attempt := 0; ; attempt++ {
		old, err := c.st.Get(ctx, pfxACL+g)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return rpc.Reply{}, err
		}
		var cur []wire.ACLEntry
		if old != nil && !r.Replace {
			if err := wire.Unmarshal(old, &cur); err != nil {
				return rpc.Reply{}, err
			}
		}
		for _, e := range r.Entries {
			cur = slices.DeleteFunc(cur, func(x wire.ACLEntry) bool { return x.Who == e.Who && x.Negative == e.Negative })
			if rights, _ := auth.ParseRights(e.Rights); rights != 0 {
				e.Rights = rights.String()
				cur = append(cur, e)
			}
		}
		var val []byte
		if len(cur) > 0 {
			if val, err = wire.Marshal(cur); err != nil {
				return rpc.Reply{}, err
			}
		}
		err = c.st.CompareAndSwap(ctx, pfxACL+g, old, val)
		if errors.Is(err, store.ErrConflict) && attempt < 10 {
			continue
		}
		if err != nil {
			return rpc.Reply{}, err
		}
		break
	}
	// Tokens carry rights: void every token issued before the change.
	// (every controller passes it on to its shares: followRevocations).
	rev := wire.Revocation{Before: time.Now().UnixNano()}
	if err := put(ctx, c.st, keyRevAll, rev); err != nil {
		return rpc.Reply{}, err
	}
	return rpc.Reply{}, nil
}

// watch streams revocations to a share until its connection ends.
func (c *Controller) watch(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	if p.id.Role != auth.RoleShare && p.id.Role != auth.RoleGateway {
		return rpc.Reply{}, wire.Errorf(wire.CodeAccess, "only shares and gateways watch for revocations")
	}
	share := p.id.Role == auth.RoleShare
	w := &watcher{who: p.id.String(), ch: make(chan wire.Revocation, 256)}
	if share {
		w.share = p.id.Name
	}
	c.mu.Lock()
	c.watchers[w] = struct{}{}
	if share {
		c.online[w.share]++
	}
	c.mu.Unlock()
	if share {
		c.markOnline(ctx)
	}
	defer func() {
		c.mu.Lock()
		delete(c.watchers, w)
		gone := false
		if share {
			c.online[w.share]--
			gone = c.online[w.share] == 0
		}
		c.mu.Unlock()
		if gone {
			c.markOffline(w.share)
		}
	}()
	// First everything revoked so far, then changes as they happen.
	kvs, err := c.st.List(ctx, pfxRevoked)
	if err != nil {
		return rpc.Reply{}, err
	}
	if all, err := c.st.Get(ctx, keyRevAll); err == nil {
		kvs = append(kvs, store.KV{Key: keyRevAll, Value: all})
	}
	for _, kv := range kvs {
		var rev wire.Revocation
		if err := wire.Unmarshal(kv.Value, &rev); err != nil {
			return rpc.Reply{}, err
		}
		if err := req.Notify(rev); err != nil {
			return rpc.Reply{}, err
		}
	}
	if err := req.Notify(wire.Revocation{}); err != nil { // marks the end of the backlog
		return rpc.Reply{}, err
	}
	for {
		select {
		case <-ctx.Done():
			return rpc.Reply{}, nil
		case rev := <-w.ch:
			if err := req.Notify(rev); err != nil {
				return rpc.Reply{}, err
			}
		}
	}
}
