package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/wire"
)

// Links lists the home domain, its CA's fingerprint and the domains it is
// linked with, as the home controller has them.
func (c *Client) Links(ctx context.Context) (wire.DomainListResp, error) {
	var r wire.DomainListResp
	err := c.ControllerCall(ctx, wire.OpDomainList, wire.DomainListReq{}, &r)
	return r, err
}

// ProbeLinks is Links after the home controller has asked each linked
// domain's controller whether it answers (pando domain ls).
func (c *Client) ProbeLinks(ctx context.Context) (wire.DomainListResp, error) {
	var r wire.DomainListResp
	err := c.ControllerCall(ctx, wire.OpDomainList, wire.DomainListReq{Probe: true}, &r)
	return r, err
}

// peerOf is what a client of a linked domain keeps of its home client.
type peerOf struct {
	home   *Client
	domain string // the linked domain

	mu      sync.Mutex
	assert  []byte
	expires time.Time
	fetched time.Time
}

// Peer makes a client of the linked domain link that acts with c's
// credentials and for the same user: it dials link's controllers, trusts
// link's CA alone for their and their shares' certificates, and presents
// with every token it asks for a group assertion that c's controller
// signs. Closing c does not close it.
func (c *Client) Peer(link wire.DomainLink, opts Options) (*Client, error) {
	if len(link.Controllers) == 0 {
		return nil, fmt.Errorf("linked domain %s names no controller", link.Name)
	}
	if link.Name == c.cfg.Domain {
		return nil, fmt.Errorf("domain %s cannot be its own linked domain", link.Name)
	}
	cfg := &config.Config{Domain: link.Name, Controller: link.Controllers[0], Controllers: link.Controllers[1:],
		User: c.cfg.User, CA: string(link.CA), Cert: c.cfg.Cert, Key: c.cfg.Key}
	opts.ActFor = c.opts.ActFor
	opts.peerOf = &peerOf{home: c, domain: link.Name}
	p, err := New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("linked domain %s: %w", link.Name, err)
	}
	return p, nil
}

// assertion returns a group assertion of this (peer) client's principal
// for its domain, from the home controller, fetched again once most of
// its life is over.
func (p *peerOf) assertion(ctx context.Context) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.assert != nil && now.Before(p.fetched.Add(time.Duration(float64(p.expires.Sub(p.fetched))*renewAt))) {
		return p.assert, nil
	}
	var r wire.DomainAssertResp
	err := p.home.ControllerCall(ctx, wire.OpDomainAssert, wire.DomainAssertReq{Domain: p.domain, For: p.home.opts.ActFor}, &r)
	if err != nil {
		if p.assert != nil && now.Before(p.expires) {
			return p.assert, nil // the home controller is away: the one held serves until it expires
		}
		return nil, fmt.Errorf("your home domain %s vouches for nobody to %s now: %w", p.home.cfg.Domain, p.domain, err)
	}
	if len(r.Assertion) == 0 {
		return nil, errors.New("the home controller sent an empty assertion")
	}
	p.assert, p.fetched, p.expires = r.Assertion, now, time.Unix(0, r.Expires)
	return p.assert, nil
}

// DomainLink links the domain l.Name (administrators): by address and the
// fingerprint of its CA, or, with code, by redeeming its invitation.
func (a Admin) DomainLink(ctx context.Context, l wire.DomainLink, fingerprint, code string) (wire.DomainLink, error) {
	var out wire.DomainLink
	err := a.c.ControllerCall(ctx, wire.OpDomainLink, wire.DomainLinkReq{Link: l, Fingerprint: fingerprint, Code: code}, &out)
	return out, err
}

// DomainUnlink ends the link with domain name at once.
func (a Admin) DomainUnlink(ctx context.Context, name string) error {
	return a.c.ControllerCall(ctx, wire.OpDomainUnlink, wire.DomainNameReq{Name: name}, nil)
}

// DomainInvite makes a one-time invitation for domain r.Name.
func (a Admin) DomainInvite(ctx context.Context, r wire.DomainInviteReq) (wire.DomainInviteResp, error) {
	var out wire.DomainInviteResp
	err := a.c.ControllerCall(ctx, wire.OpDomainInvite, r, &out)
	return out, err
}
