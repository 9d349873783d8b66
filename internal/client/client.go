package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"pando.dev/pando/internal/remote"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Options tune a Client.
type Options struct {
	// Streams is the number of data channels per share (default 2).
	Streams int
	// Protection of the data channels: "private" (TLS, the default),
	// "safe" (authenticated, not encrypted) or "clear" (authenticated
	// set-up only), if the share allows it.
	Protection string
	// MountTTL is how long the mount table is trusted before it is read
	// again (default 5s). While no controller answers, the table held
	// stays in use.
	MountTTL time.Duration
	// KeepFresh renews, in the background and ahead of expiry, the tokens
	// used since they were fetched (an agent sets it).
	KeepFresh bool
	// Session names this client's invalidation session at shares (an
	// agent sets it; changes it makes are then not reported back to it).
	Session string
	// EarlyData opens a share's data channels as soon as its control
	// channel, in the background, rather than at the first bulk request
	// (an agent sets it: its first cold read then waits for no handshake).
	EarlyData bool
	// ActFor, set by a gateway (whose credentials carry the gateway
	// role), names the user every request is made for: tokens are asked
	// for in that user's name and carry only that user's rights.
	ActFor string
	// Bearer, set by a gateway instead of ActFor, is a JWT that every
	// token is asked for with (wire.ResolveReq.Bearer): the controller
	// verifies it each time, and the tokens carry its principal
	// (BearerFor) and no right its scopes do not cover.
	Bearer, BearerFor string
	// Log, if set, gets one line when a share goes down and one when it
	// comes back (unless a health hook takes them, see SetHealthHook).
	Log *slog.Logger
	// CertRenewed, if set, is called with the new certificate and key
	// (PEM) each time a KeepFresh client renews its certificate, to keep
	// them (an agent writes them back to its configuration file).
	CertRenewed func(cert, key []byte)
	// RenewCert renews the certificate (as KeepFresh does) in a client
	// that keeps nothing else fresh: a gateway's own, a long transfer's.
	RenewCert bool
	// CertOf, if set, is the client whose certificate this one presents,
	// as it renews it (a gateway's clients for its users present the
	// gateway's own).
	CertOf *Client

	peerOf *peerOf // a linked domain's client (Peer)
}

// Client talks to one domain's controller and its shares.
type Client struct {
	cfg     *config.Config
	opts    Options
	ctrlTLS *tls.Config
	cert    atomic.Pointer[tls.Certificate] // presented to every server; renewed in place (renewCert)

	addrs  []string // the controllers' addresses
	health health
	done   chan struct{} // closed by Close

	mu         sync.Mutex
	ctrl       *rpc.Conn
	mounts     []wire.MountEntry
	mountsAt   time.Time
	mountsGen  uint64             // counts drops of the table (forgetMounts)
	mountsLive atomic.Int64       // when the controller last streamed the table (followMounts), unix ns; 0: not streaming
	mountsDone chan struct{}      // a read of the table under way (refreshMounts)
	mountsFrom time.Time          // when it began
	targets    map[string]*target // by mount prefix
	renewing   map[string]bool    // prefixes whose token is being renewed
	shares     map[string]*shareConn
	closed     bool
	hook       func(HealthEvent)

	counts [256]atomic.Uint64 // requests sent, by op
	data   atomic.Int64       // file data bytes sent and received
	// fixed: a delegated client, confined to the one target it was given.
	fixed bool
	// peer is set in a client of a linked domain (Peer): its home client.
	peer *peerOf
}

// DataBytes returns the file data bytes this client sent to and received
// from shares.
func (c *Client) DataBytes() int64 { return c.data.Load() }

// Counts returns the requests this client sent, by op name.
func (c *Client) Counts() map[string]uint64 {
	m := make(map[string]uint64)
	for i := range c.counts {
		if n := c.counts[i].Load(); n > 0 {
			m[wire.Op(i).String()] = n
		}
	}
	return m
}

func (c *Client) count(op wire.Op) {
	if int(op) < len(c.counts) {
		c.counts[op].Add(1)
	}
}

// target is what the controller said about one mount prefix.
type target struct {
	wire.ResolveResp
	fetched time.Time
	used    atomic.Bool // since it was fetched
}

func (t *target) expires() time.Time { return time.Unix(0, t.Expires) }

// renewAt is when the token is renewed, ahead of its expiry.
func (t *target) renewAt() time.Time {
	return t.fetched.Add(time.Duration(float64(t.expires().Sub(t.fetched)) * renewAt))
}

// New makes a client from a configuration. It does not connect yet.
func New(cfg *config.Config, opts Options) (*Client, error) {
	if opts.Streams <= 0 {
		opts.Streams = 2
	}
	if opts.MountTTL <= 0 {
		opts.MountTTL = 5 * time.Second
	}
	domain := cfg.Domain
	ctrlTLS, err := cfg.ClientTLS(func(id auth.Identity) error {
		if id.Role != auth.RoleController || id.Domain != domain {
			return fmt.Errorf("expected the controller of domain %s, but the server is %s", domain, id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	cert, err := cfg.Certificate()
	if err != nil {
		return nil, err
	}
	c := &Client{
		cfg: cfg, opts: opts, ctrlTLS: ctrlTLS, addrs: cfg.ControllerAddrs(), done: make(chan struct{}),
		targets: make(map[string]*target), renewing: make(map[string]bool), shares: make(map[string]*shareConn),
	}
	c.peer = opts.peerOf
	c.cert.Store(&cert)
	c.presentCert(ctrlTLS)
	if opts.KeepFresh {
		go c.keepFresh()
		go c.followMounts()
	}
	if (opts.KeepFresh || opts.RenewCert) && c.peer == nil && opts.CertOf == nil && opts.ActFor == "" && opts.Bearer == "" {
		go c.renewCert()
	}
	return c, nil
}

// presented is the certificate the client presents now.
func (c *Client) presented() *tls.Certificate {
	if c.opts.CertOf != nil {
		return c.opts.CertOf.presented()
	}
	return c.cert.Load()
}

// presentCert has conf present the client's certificate as it is at each
// handshake (a renewed one once renewed; a linked domain's client, its
// home client's), whatever CAs the server names.
func (c *Client) presentCert(conf *tls.Config) {
	conf.Certificates = nil
	conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if c.peer != nil {
			return c.peer.home.presented(), nil
		}
		return c.presented(), nil
	}
}

// Domain is the client's home domain.
func (c *Client) Domain() string { return c.cfg.Domain }

// Session is the client's invalidation session name ("" if none).
func (c *Client) Session() string { return c.opts.Session }

// Principal is who the client is, e.g. "alice@uva".
func (c *Client) Principal() string {
	if c.peer != nil {
		return c.peer.home.Principal()
	}
	if c.opts.ActFor != "" {
		return c.opts.ActFor + "@" + c.cfg.Domain
	}
	if c.opts.BearerFor != "" {
		return c.opts.BearerFor
	}
	return c.cfg.User + "@" + c.cfg.Domain
}

// Close ends every connection.
func (c *Client) Close() error {
	c.mu.Lock()
	if !c.closed {
		close(c.done)
	}
	c.closed = true
	ctrl := c.ctrl
	c.ctrl = nil
	shares := c.shares
	c.shares = make(map[string]*shareConn)
	c.mu.Unlock()
	if ctrl != nil {
		ctrl.Close()
	}
	for _, s := range shares {
		s.close()
	}
	return nil
}

func explain(err error) error {
	var he *rpc.HandshakeError
	if errors.As(err, &he) {
		return auth.ExplainHandshakeError(he.Err, he.Addr)
	}
	return err
}

// controller returns a working connection to the controller.
func (c *Client) controller(ctx context.Context) (*rpc.Conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errors.New("client is closed")
	}
	if c.ctrl != nil && c.ctrl.Err() == nil {
		conn := c.ctrl
		c.mu.Unlock()
		return conn, nil
	}
	c.mu.Unlock()
	conn, err := c.dialController(ctx)
	if err != nil {
		c.note(err)
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctrl != nil && c.ctrl.Err() == nil {
		conn.Close()
		return c.ctrl, nil
	}
	c.ctrl = conn
	return conn, nil
}

// ControllerCall sends one request to the controller, retrying idempotent
// requests once on a broken connection.
func (c *Client) ControllerCall(ctx context.Context, op wire.Op, req, resp any) error {
	for attempt := 0; ; attempt++ {
		conn, err := c.controller(ctx)
		if err != nil {
			return err
		}
		c.count(op)
		_, err = conn.Call(ctx, op, req, nil, resp, nil)
		if wire.FateOf(err) == wire.Transient && errors.Is(err, rpc.ErrBroken) && op.Idempotent() && attempt == 0 {
			continue
		}
		err = explain(err)
		c.note(err)
		return err
	}
}

// Loc is a global path resolved to a place in a share.
type Loc = remote.Loc

// Clean turns "/uva/x", "uva/x" or "pando://uva/x" into the cleaned global
// path "/uva/x". It refuses other URL schemes.
func Clean(p string) (string, error) {
	if rest, ok := strings.CutPrefix(p, "pando://"); ok {
		p = "/" + rest
	} else if i := strings.Index(p, "://"); i > 0 && !strings.Contains(p[:i], "/") {
		return "", fmt.Errorf("%q: only pando:// URLs and /<domain>/... paths name grid files here", p)
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return path.Clean(p), nil
}

// MountTable returns the controller's mount table. The table held is read
// again after MountTTL; while no controller answers, the table held is
// used, however old (a request waits for no controller then).
func (c *Client) MountTable(ctx context.Context) ([]wire.MountEntry, error) {
	c.mu.Lock()
	m, at := c.mounts, c.mountsAt
	c.mu.Unlock()
	if m == nil {
		return c.readMounts(ctx)
	}
	if time.Since(at) < c.opts.MountTTL || c.mountsStreamed() || !c.mayTry() {
		return m, nil
	}
	done, began := c.refreshMounts()
	wait := time.Until(began.Add(refreshWait))
	if c.ctrlDown() || wait <= 0 {
		return m, nil
	}
	// The controller answered last: wait a moment for the new table, so
	// that a mount changed elsewhere shows at once (not longer: a
	// controller that does not answer must not hold requests up).
	tm := time.NewTimer(wait)
	defer tm.Stop()
	select {
	case <-done:
	case <-tm.C:
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mounts != nil {
		m = c.mounts
	}
	return m, nil
}

// forgetMounts drops the cached mount table and tokens (after a change).
func (c *Client) forgetMounts() {
	c.mu.Lock()
	c.mounts = nil
	c.mountsGen++
	c.targets = make(map[string]*target)
	c.mu.Unlock()
}

// under reports whether p is prefix or below it, component-wise.
func under(p, prefix string) bool { return remote.Under(p, prefix) }

// Locate resolves a global path against the mount table, to the primary
// location of the mount that holds it.
func (c *Client) Locate(ctx context.Context, gpath string) (Loc, error) {
	g, best, err := c.mountOf(ctx, gpath)
	if err != nil || best == nil {
		return Loc{Global: g}, err
	}
	return Loc{Global: g, Prefix: best.Prefix, Share: best.Share, Rel: joinRel(best.SharePath, g, best.Prefix)}, nil
}

// Locations returns every location of the mount that holds a global path,
// the primary first, each with the share-relative path of gpath there
// (none for a path above every mount). Requests go to the primary alone;
// the others are for whoever asks (`pando ns ls`).
func (c *Client) Locations(ctx context.Context, gpath string) ([]wire.Location, error) {
	g, best, err := c.mountOf(ctx, gpath)
	if err != nil || best == nil {
		return nil, err
	}
	locs := best.Locations()
	for i := range locs {
		locs[i].SharePath = joinRel(locs[i].SharePath, g, best.Prefix)
	}
	return locs, nil
}

// mountOf cleans a global path and finds the mount that holds it (the
// longest prefix; nil above every mount).
func (c *Client) mountOf(ctx context.Context, gpath string) (string, *wire.MountEntry, error) {
	g, err := Clean(gpath)
	if err != nil {
		return "", nil, err
	}
	if g != "/" && !under(g, "/"+c.cfg.Domain) {
		dom := strings.SplitN(strings.TrimPrefix(g, "/"), "/", 2)[0]
		return "", nil, &wire.Error{Code: wire.CodeNotExist, Message: fmt.Sprintf("%s: domain %q is not linked to this one (this is domain %q)", g, dom, c.cfg.Domain)}
	}
	mounts, err := c.MountTable(ctx)
	if err != nil {
		return "", nil, err
	}
	return g, remote.MountOf(mounts, g), nil
}

// joinRel is the share-relative path of global path g, below mount
// prefix, at a location whose share path stands for prefix.
func joinRel(sharePath, g, prefix string) string { return remote.RelPath(sharePath, g, prefix) }

// target returns a resolution (share addresses and token) for prefix. A
// token past renewAt of its life is renewed in the background and used
// meanwhile; an expired one (or, with force, one a share refused) is
// renewed before the request goes on.
func (c *Client) target(ctx context.Context, prefix string, force bool) (*target, error) {
	now := time.Now()
	c.mu.Lock()
	t := c.targets[prefix]
	c.mu.Unlock()
	if c.fixed {
		if t != nil && now.Before(t.expires()) {
			return t, nil
		}
		return nil, wire.Errorf(wire.CodeTokenExpired, "the token delegated for %s has expired; the transfer's client must ask again", prefix)
	}
	if t != nil && !force && now.Before(t.expires()) {
		t.used.Store(true)
		if !now.Before(t.renewAt()) {
			c.renewSoon(prefix, t.expires())
		}
		return t, nil
	}
	if t != nil && !c.mayTryBy(t.expires()) {
		// Backing off from a controller that did not answer: fail at once.
		return nil, c.tokenLapsed(prefix, t, force, c.lastCtrlErr())
	}
	resp, err := c.resolve(ctx, prefix, "")
	if err != nil {
		if t != nil && unreachable(err) {
			return nil, c.tokenLapsed(prefix, t, force, err)
		}
		return nil, err
	}
	t = c.keepTarget(prefix, resp)
	t.used.Store(true)
	return t, nil
}

// tokenLapsed explains why a request cannot go on: its token expired (or a
// share refused it) and no controller answered for a new one.
func (c *Client) tokenLapsed(prefix string, t *target, refused bool, err error) error {
	what := fmt.Sprintf("the access token for %s expired at %s", prefix, t.expires().UTC().Format(time.RFC3339))
	if refused {
		what = fmt.Sprintf("share %s refused the access token for %s", t.Share, prefix)
	}
	return &ctrlError{msg: fmt.Sprintf("%s and no controller of %s answers to renew it (%v); requests there work again once one does",
		what, c.cfg.Domain, err), err: err}
}

// resolve asks the controller for mount prefix's share and a token for it
// (that share proxy, if named, may present on this client's behalf).
func (c *Client) resolve(ctx context.Context, prefix, proxy string) (wire.ResolveResp, error) {
	var resp wire.ResolveResp
	req := wire.ResolveReq{Path: prefix, Proxy: proxy, For: c.opts.ActFor, Bearer: c.opts.Bearer}
	if c.peer != nil {
		a, err := c.peer.assertion(ctx)
		if err != nil {
			return resp, err
		}
		req.Assertion = a
	}
	if err := c.ControllerCall(ctx, wire.OpResolve, req, &resp); err != nil {
		return wire.ResolveResp{}, err
	}
	if resp.Share == "" {
		c.forgetMounts()
		return wire.ResolveResp{}, &wire.Error{Code: wire.CodeStale, Message: fmt.Sprintf("%s is no longer a mount; try again", prefix)}
	}
	return resp, nil
}

// ControllerWatch runs a watch request on the controller (see rpc.Conn.Watch).
func (c *Client) ControllerWatch(ctx context.Context, op wire.Op, req any, fn func(meta []byte) error) error {
	conn, err := c.controller(ctx)
	if err != nil {
		return err
	}
	return conn.Watch(ctx, op, req, fn)
}
