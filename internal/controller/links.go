package controller

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/store"
	"pando.dev/pando/internal/wire"
)

// Linked domains (docs/federation.md). A link is a record link/<name> in
// the store: the other domain's controllers, CA certificate and token key,
// and what this domain admits of its principals. A certificate of a linked
// domain is accepted only if that domain's CA issued it (the chain is
// checked against the CA of the domain the identity names); a principal of
// it reaches only resolve, the mount table and whoami, with its home
// domain's signed word on its groups (a group assertion), and this domain
// decides its rights from its own ACLs. Unlinking deletes the record and
// writes two revocations every controller passes on to its shares: the
// linked domain's tokens and connections are void, and the set of trusted
// CAs without it.

// Store keys of links.
const (
	pfxLink      = "link/"
	pfxInvite    = "invite/"
	keyRevTrust  = pfxRevoked + "trust"
	pfxRevDomain = pfxRevoked + "domain:"
)

// Bounds of links.
const (
	inviteDefault = time.Hour
	inviteMax     = 7 * 24 * time.Hour
	assertMax     = 5 * time.Minute // a group assertion's life: how long a home revocation takes to reach a linked domain
	linkDialMax   = 5 * time.Second
	maxLinks      = 256
	maxLinkGroups = 64
	invitePrefix  = "pando-invite."
)

// linkOf reads the link with domain name (nil if there is none).
func (c *Controller) linkOf(ctx context.Context, name string) (*wire.DomainLink, error) {
	l, err := get[wire.DomainLink](ctx, c.st, pfxLink+name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return l, err
}

func (c *Controller) links(ctx context.Context) ([]wire.DomainLink, error) {
	kvs, err := c.st.List(ctx, pfxLink)
	if err != nil {
		return nil, err
	}
	out := make([]wire.DomainLink, 0, len(kvs))
	for _, kv := range kvs {
		var l wire.DomainLink
		if err := wire.Unmarshal(kv.Value, &l); err != nil {
			return nil, fmt.Errorf("state record %s is damaged: %w", kv.Key, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// hello is what this controller tells anyone about its domain.
func (c *Controller) hello(ctx context.Context) wire.DomainHello {
	return wire.DomainHello{Domain: c.keys.domain, Controllers: c.Controllers(ctx), CA: c.keys.ca.CertPEM(), TokenKey: c.keys.tokenPub}
}

// fingerprint is the home CA's.
func (c *Controller) fingerprint() string {
	fp, _ := auth.FingerprintPEM(c.keys.ca.CertPEM())
	return fp
}

// verifyChain checks a client's chain against caPEM, the CA of domain.
func verifyChain(chain []*x509.Certificate, caPEM []byte, domain string) (auth.Identity, error) {
	return verifyChainFor(chain, caPEM, domain, x509.ExtKeyUsageClientAuth)
}

// verifyChainFor checks a peer's chain, for usage, against caPEM, the CA of
// domain (whose identities it alone may issue).
func verifyChainFor(chain []*x509.Certificate, caPEM []byte, domain string, usage x509.ExtKeyUsage) (auth.Identity, error) {
	pool, err := auth.PoolFromPEM(caPEM)
	if err != nil {
		return auth.Identity{}, err
	}
	return auth.NewTrust(domain, pool).Verify(chain, usage)
}

// dialDomain dials another domain's controller at one of addrs with this
// controller's certificate, asks its hello and checks it: the CA must have
// the fingerprint fp, the server's certificate must be that CA's
// controller of domain name.
func (c *Controller) dialDomain(ctx context.Context, addrs []string, name, fp string) (*rpc.Conn, wire.DomainHello, error) {
	ctx, cancel := context.WithTimeout(ctx, linkDialMax)
	defer cancel()
	var chain []*x509.Certificate
	conf := &tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: c.rpc.TLS.Certificates,
		InsecureSkipVerify: true, // the chain is checked against the CA the fingerprint names, below
		VerifyConnection: func(cs tls.ConnectionState) error {
			chain = cs.PeerCertificates
			return nil
		},
	}
	var errs []error
	for _, a := range addrs {
		conn, err := rpc.Dial(ctx, a, conf, wire.ChannelControl)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			continue
		}
		var h wire.DomainHello
		if _, err := conn.Call(ctx, wire.OpDomainHello, wire.Empty{}, nil, &h, nil); err != nil {
			conn.Close()
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			continue
		}
		if h.Domain != name {
			conn.Close()
			return nil, h, fmt.Errorf("the controller at %s is of domain %s, not %s", a, h.Domain, name)
		}
		same, err := auth.SameFingerprint(h.CA, fp)
		if err != nil || !same {
			conn.Close()
			have, _ := auth.FingerprintPEM(h.CA)
			return nil, h, fmt.Errorf("the CA certificate of domain %s at %s has the fingerprint %s, not the one given; check it with the other domain's administrator (pando domain fingerprint)", name, a, have)
		}
		if len(h.TokenKey) != ed25519.PublicKeySize {
			conn.Close()
			return nil, h, fmt.Errorf("the controller at %s sent no usable token key", a)
		}
		id, err := verifyChainFor(chain, h.CA, name, x509.ExtKeyUsageServerAuth)
		if err != nil || id.Role != auth.RoleController {
			conn.Close()
			return nil, h, fmt.Errorf("the server at %s is not domain %s's controller: %v", a, name, err)
		}
		return conn, h, nil
	}
	return nil, wire.DomainHello{}, fmt.Errorf("no controller of domain %s answers: %w", name, errors.Join(errs...))
}

// checkLinkReq validates what an administrator asks a link to admit.
func (c *Controller) checkLinkReq(l *wire.DomainLink) error {
	if err := auth.ValidName(l.Name); err != nil {
		return wire.Errorf(wire.CodeInvalid, "domain name: %v", err)
	}
	if l.Name == c.keys.domain {
		return wire.Errorf(wire.CodeInvalid, "%s is this domain; a domain cannot link with itself", l.Name)
	}
	switch l.Admit {
	case "":
		l.Admit = wire.AdmitAll
	case wire.AdmitAll, wire.AdmitNone:
	case wire.AdmitGroups:
		if len(l.Groups) == 0 {
			return wire.Errorf(wire.CodeInvalid, "admitting groups of %s needs at least one group (--admit group:NAME)", l.Name)
		}
	default:
		return wire.Errorf(wire.CodeInvalid, "a link admits all, none or groups, not %q", l.Admit)
	}
	if len(l.Groups) > maxLinkGroups {
		return wire.Errorf(wire.CodeInvalid, "a link admits at most %d groups", maxLinkGroups)
	}
	for _, g := range l.Groups {
		if err := auth.ValidName(g); err != nil {
			return wire.Errorf(wire.CodeInvalid, "group: %v", err)
		}
	}
	if l.Admit != wire.AdmitGroups {
		l.Groups = nil
	}
	if l.Prefix == "/" {
		l.Prefix = ""
	}
	if l.Prefix != "" {
		if _, err := c.cleanGlobal(l.Prefix, false); err != nil {
			return err
		}
	}
	for _, a := range l.Controllers {
		if !controllerAddr(a) {
			return wire.Errorf(wire.CodeInvalid, "%q is not a HOST:PORT address (or relay://HOST:PORT/controller@DOMAIN)", a)
		}
	}
	return nil
}

// domainLink links a domain (administrators): by address and fingerprint,
// or by redeeming an invitation code.
func (c *Controller) domainLink(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.DomainLinkReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if _, err := c.require(ctx, p, "/", auth.Admin); err != nil {
		return rpc.Reply{}, err
	}
	l := r.Link
	var secret []byte
	fp := r.Fingerprint
	if r.Code != "" {
		dom, addrs, f, s, err := DecodeInvite(r.Code)
		if err != nil {
			return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "%v", err)
		}
		l.Name, l.Controllers, fp, secret = dom, addrs, f, s
	}
	if err := c.checkLinkReq(&l); err != nil {
		return rpc.Reply{}, err
	}
	if len(l.Controllers) == 0 || len(l.Controllers) > 16 {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "name one to 16 controllers of %s (--controller HOST:PORT)", l.Name)
	}
	if _, err := auth.NormFingerprint(fp); err != nil {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "%v", err)
	}
	if ls, err := c.links(ctx); err != nil {
		return rpc.Reply{}, err
	} else if len(ls) >= maxLinks && !slices.ContainsFunc(ls, func(o wire.DomainLink) bool { return o.Name == l.Name }) {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "domain %s has %d links, the most it keeps; unlink one first", c.keys.domain, maxLinks)
	}
	conn, h, err := c.dialDomain(ctx, l.Controllers, l.Name, fp)
	if err != nil {
		return rpc.Reply{}, wire.Errorf(wire.CodeUnavailable, "cannot link with %s: %v", l.Name, err)
	}
	defer conn.Close()
	if secret != nil {
		cctx, cancel := context.WithTimeout(ctx, linkDialMax)
		_, err := conn.Call(cctx, wire.OpDomainJoin, wire.DomainJoinReq{Secret: secret, Hello: c.hello(ctx)}, nil, &h, nil)
		cancel()
		if err != nil {
			return rpc.Reply{}, fmt.Errorf("domain %s refused the invitation: %w", l.Name, err)
		}
	}
	now := time.Now().UnixNano()
	l.CA, l.TokenKey, l.Created, l.By, l.LastContact, l.LastError = h.CA, h.TokenKey, now, p.id.String(), now, ""
	for _, a := range h.Controllers {
		if !slices.Contains(l.Controllers, a) && len(l.Controllers) < 16 {
			l.Controllers = append(l.Controllers, a)
		}
	}
	if err := c.storeLink(ctx, l); err != nil {
		return rpc.Reply{}, err
	}
	c.log.Info("domain linked", "domain", l.Name, "admit", l.Admit, "by", p.id.String())
	return rpc.Reply{Msg: l}, nil
}

// storeLink writes a link and the trust set that follows from it.
func (c *Controller) storeLink(ctx context.Context, l wire.DomainLink) error {
	// A trusted issuer's principals are SUB@NAME: a domain linked under an
	// issuer's name would share its principals (but for its own issuer).
	if is, err := get[issuerRec](ctx, c.st, pfxIssuer+l.Name); err == nil && is.Issuer != "pando://"+l.Name {
		return wire.Errorf(wire.CodeExist, "%s names a trusted token issuer (%s), whose principals are %s@%s; distrust it first (pando domain distrust-issuer %s) or ask the other domain to be known by its own name",
			l.Name, is.Issuer, "SUB", l.Name, l.Name)
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err := put(ctx, c.st, pfxLink+l.Name, l); err != nil {
		return err
	}
	c.noteContact(l.Name, nil)
	return c.publishTrust(ctx)
}

// publishTrust writes the set of linked CAs, which every controller passes
// on to its shares (followRevocations).
func (c *Controller) publishTrust(ctx context.Context) error {
	ls, err := c.links(ctx)
	if err != nil {
		return err
	}
	rev := wire.Revocation{TrustSet: true}
	for _, l := range ls {
		rev.Trusted = append(rev.Trusted, wire.TrustedDomain{Name: l.Name, CA: l.CA})
	}
	return put(ctx, c.st, keyRevTrust, rev)
}

// domainUnlink ends a link at once (administrators).
func (c *Controller) domainUnlink(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.DomainNameReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if _, err := c.require(ctx, p, "/", auth.Admin); err != nil {
		return rpc.Reply{}, err
	}
	l, err := c.linkOf(ctx, r.Name)
	if err != nil {
		return rpc.Reply{}, err
	}
	if l == nil {
		return rpc.Reply{}, wire.Errorf(wire.CodeNotExist, "domain %s is not linked with %s (see pando domain ls)", r.Name, c.keys.domain)
	}
	if err := c.st.Delete(ctx, pfxLink+r.Name); err != nil {
		return rpc.Reply{}, err
	}
	if err := put(ctx, c.st, pfxRevDomain+r.Name, wire.Revocation{Domain: r.Name, Before: time.Now().UnixNano()}); err != nil {
		return rpc.Reply{}, err
	}
	if err := c.publishTrust(ctx); err != nil {
		return rpc.Reply{}, err
	}
	c.log.Info("domain unlinked", "domain", r.Name, "by", p.id.String())
	return rpc.Reply{}, nil
}

// endDomain drops this controller's connections of an unlinked domain's
// principals.
func (c *Controller) endDomain(domain string) {
	if domain == "" || domain == c.keys.domain {
		return
	}
	c.rpc.EachConn(func(sc *rpc.ServerConn) {
		if pp, ok := sc.State.(*peer); ok && pp.id.Domain == domain {
			go sc.End(wire.Errorf(wire.CodeTokenRevoked, "domain %s ended its link with %s; %s is served here no more", c.keys.domain, domain, pp.id))
		}
	})
}

// contacts is when each linked domain's controller last answered, and how
// the last attempt failed.
type contacts struct {
	mu   sync.Mutex
	last map[string]int64
	errs map[string]string
}

func (c *Controller) noteContact(domain string, err error) {
	c.contact.mu.Lock()
	defer c.contact.mu.Unlock()
	if c.contact.last == nil {
		c.contact.last, c.contact.errs = map[string]int64{}, map[string]string{}
	}
	if err == nil {
		c.contact.last[domain] = time.Now().UnixNano()
		delete(c.contact.errs, domain)
	} else {
		c.contact.errs[domain] = err.Error()
	}
}

// domainList lists the home domain and its links; with Probe, each linked
// domain's controller is asked its hello first (in parallel, bounded).
func (c *Controller) domainList(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.DomainListReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if p.id.Domain != c.keys.domain {
		return rpc.Reply{}, wire.Errorf(wire.CodeAccess, "%s is not of domain %s: only its own principals list its links", p.id, c.keys.domain)
	}
	ls, err := c.links(ctx)
	if err != nil {
		return rpc.Reply{}, err
	}
	if r.Probe {
		var wg sync.WaitGroup
		for _, l := range ls {
			wg.Go(func() {
				fp, _ := auth.FingerprintPEM(l.CA)
				conn, _, err := c.dialDomain(ctx, l.Controllers, l.Name, fp)
				if err == nil {
					conn.Close()
				}
				c.noteContact(l.Name, err)
			})
		}
		wg.Wait()
	}
	c.contact.mu.Lock()
	for i := range ls {
		if t := c.contact.last[ls[i].Name]; t > ls[i].LastContact {
			ls[i].LastContact = t
		}
		ls[i].LastError = c.contact.errs[ls[i].Name]
	}
	c.contact.mu.Unlock()
	return rpc.Reply{Msg: wire.DomainListResp{Home: c.keys.domain, Fingerprint: c.fingerprint(), Links: ls}}, nil
}
