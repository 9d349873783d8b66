// Package federation is one namespace over linked domains: a Router is a
// remote.Namespace and a remote.Data that sends each call to the domain
// the path's first component names (/uva/... to the home domain's client,
// /tacc/... to a client of the linked domain tacc, made on first use and
// closed when the link goes), and makes up the root, which lists the home
// domain and every linked one. The vfs holds a Router where it held the
// home client; with no link it passes every call to the home client as
// it is.
//
// It learns the links from the home controller (client.Links): again on
// use once LinkTTL has passed, and after a linked domain failed a call.
// Share names may repeat across domains: a linked domain's shares are
// named share@domain wherever the vfs sees them (locations, the mount
// table, health), so that its caches and pollers keep them apart.
//
// A linked domain cannot stop the home namespace: its part of the mount
// table waits at most TableBound (the last table it sent serves
// meanwhile), each call to it at most Bound, and a domain that let a call
// run out is marked down (its shares unreachable, so that the vfs serves
// what it caches of them read-only, marked stale) and failed at once
// while a probe asks every Retry whether it is back.
package federation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/wire"
)

// Domain is one domain's namespace as the router holds it.
type Domain struct {
	NS   remote.Namespace
	Data remote.Data
	// Client is the domain's client, when NS is one: what the CLI and
	// copies use (nil for a namespace of another kind, as in tests).
	Client *client.Client
	// Close releases the domain (nil: nothing to release).
	Close func() error
}

// Config configures a Router.
type Config struct {
	Home   string // the home domain's name
	HomeNS Domain // its namespace (the router never closes it)
	// Links lists the linked domains as the home controller has them.
	Links func(ctx context.Context) ([]wire.DomainLink, error)
	// Peer makes the namespace of a linked domain.
	Peer func(link wire.DomainLink) (Domain, error)
	// LinkTTL is how long the links read are trusted (default 5s).
	LinkTTL time.Duration
	// Bound bounds each call to a linked domain (default 10s; a long
	// poll's wait comes on top).
	Bound time.Duration
	// TableBound bounds a linked domain's part of MountTable (default 2s).
	TableBound time.Duration
	// Retry is how often a linked domain marked down is asked whether it
	// is back (default 2s).
	Retry time.Duration
	Log   *slog.Logger
}

// Router is one namespace over the home domain and its linked domains. It
// is safe for concurrent use.
type Router struct {
	cfg  Config
	home Domain

	mu      sync.Mutex
	peers   map[string]*peer
	linksAt time.Time     // when the links were last read (or tried)
	reading chan struct{} // closed when the read under way ends; nil if none
	hook    func(remote.HealthEvent)
	closed  bool
}

var (
	_ remote.Namespace = (*Router)(nil)
	_ remote.Data      = (*Router)(nil)
)

// New makes a router over cfg.HomeNS and the domains cfg.Links names.
func New(cfg Config) *Router {
	if cfg.LinkTTL <= 0 {
		cfg.LinkTTL = 5 * time.Second
	}
	if cfg.Bound <= 0 {
		cfg.Bound = 10 * time.Second
	}
	if cfg.TableBound <= 0 {
		cfg.TableBound = 2 * time.Second
	}
	if cfg.Retry <= 0 {
		cfg.Retry = 2 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Router{cfg: cfg, home: cfg.HomeNS, peers: make(map[string]*peer)}
}

// ForClient makes a router over the home client c, whose linked domains
// it reaches with clients made by c.Peer with opts (those c was made
// with, for the same behaviour). Closing the router does not close c.
func ForClient(c *client.Client, opts client.Options) *Router {
	return New(Config{
		Home:   c.Domain(),
		HomeNS: Domain{NS: c, Data: client.Data(c), Client: c},
		Links: func(ctx context.Context) ([]wire.DomainLink, error) {
			r, err := c.Links(ctx)
			return r.Links, err
		},
		Peer: func(l wire.DomainLink) (Domain, error) {
			p, err := c.Peer(l, opts)
			if err != nil {
				return Domain{}, err
			}
			return Domain{NS: p, Data: client.Data(p), Client: p, Close: p.Close}, nil
		},
		Log: opts.Log,
	})
}

// Close closes the clients of the linked domains.
func (r *Router) Close() error {
	r.mu.Lock()
	r.closed = true
	peers := r.peers
	r.peers = make(map[string]*peer)
	r.mu.Unlock()
	for _, p := range peers {
		p.close()
	}
	return nil
}

// first returns the first component of the cleaned global path g ("" for
// the root).
func first(g string) string {
	name, _, _ := strings.Cut(strings.TrimPrefix(g, "/"), "/")
	return name
}

// clean cleans a global path as the client does (a pando:// URL too).
func clean(gpath string) string {
	g, err := client.Clean(gpath)
	if err != nil {
		return gpath
	}
	return g
}

// at returns the linked domain gpath lies in (nil: the home domain, which
// answers for the root and for names nobody links) and its namespace.
// For the root and a name it does not know, it reads the links again
// first if they are older than LinkTTL (waiting at most TableBound for
// them); for a linked domain it has them read in the background then.
func (r *Router) at(ctx context.Context, gpath string) (*peer, Domain, error) {
	name := first(clean(gpath))
	if name == r.cfg.Home {
		return nil, r.home, nil
	}
	p, stale := r.lookup(name)
	switch {
	case p == nil && stale:
		r.refreshLinks(ctx, r.cfg.TableBound)
		if p, _ = r.lookup(name); p == nil {
			return nil, r.home, nil
		}
	case p == nil:
		return nil, r.home, nil
	case stale:
		r.readLinksSoon()
	}
	d, err := p.domain()
	return p, d, err
}

// lookup returns the linked domain name (nil if none) and whether the
// links are older than LinkTTL.
func (r *Router) lookup(name string) (*peer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var p *peer
	if name != "" {
		p = r.peers[name]
	}
	return p, time.Since(r.linksAt) >= r.cfg.LinkTTL
}

// staleLinks has the links read again at the next use.
func (r *Router) staleLinks() {
	r.mu.Lock()
	r.linksAt = time.Time{}
	r.mu.Unlock()
}

// readLinksSoon has the links read in the background, unless a read is
// under way.
func (r *Router) readLinksSoon() { r.refreshLinks(context.Background(), 0) }

// refreshLinks starts a read of the links unless one is under way, and
// waits for it up to wait (or until ctx ends): the read goes on in the
// background after, bounded by Bound.
func (r *Router) refreshLinks(ctx context.Context, wait time.Duration) {
	r.mu.Lock()
	ch := r.reading
	if ch == nil {
		ch = make(chan struct{})
		r.reading = ch
		go r.readLinks(ch)
	}
	r.mu.Unlock()
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
}

// readLinks reads the links from the home controller (bounded by Bound)
// and makes the linked domains what they say: new ones known (their
// clients are made on first use), changed ones made again, gone ones
// dropped and closed. A failed read keeps the links held. It closes done
// at the end.
func (r *Router) readLinks(done chan struct{}) {
	defer close(done)
	r.mu.Lock()
	if r.closed || r.cfg.Links == nil {
		r.reading, r.linksAt = nil, time.Now()
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()

	bctx, cancel := context.WithTimeout(context.Background(), r.cfg.Bound)
	links, err := r.cfg.Links(bctx)
	cancel()
	var drop []*peer
	r.mu.Lock()
	r.reading, r.linksAt = nil, time.Now()
	if err == nil && !r.closed {
		seen := make(map[string]bool)
		for _, l := range links {
			if l.Name == r.cfg.Home || auth.ValidName(l.Name) != nil || seen[l.Name] {
				continue
			}
			seen[l.Name] = true
			if old := r.peers[l.Name]; old != nil {
				if sameLink(old.link, l) {
					continue
				}
				drop = append(drop, old)
			}
			r.peers[l.Name] = &peer{name: l.Name, link: l, r: r}
		}
		for name, p := range r.peers {
			if !seen[name] {
				drop = append(drop, p)
				delete(r.peers, name)
			}
		}
	}
	r.mu.Unlock()
	if err != nil {
		r.cfg.Log.Debug("the linked domains could not be read; those held stay", "err", err)
	}
	for _, p := range drop {
		r.cfg.Log.Info("linked domain changed or unlinked; its client is closed", "domain", p.name)
		p.close()
	}
}

// sameLink reports whether a link still reaches the same domain the same
// way (what a client of it was made from).
func sameLink(a, b wire.DomainLink) bool {
	return slices.Equal(a.Controllers, b.Controllers) && string(a.CA) == string(b.CA)
}

// linked returns the linked domains' names, sorted, and the domains
// whose namespaces were made.
func (r *Router) linked() ([]string, []*peer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := slices.Sorted(maps.Keys(r.peers))
	var made []*peer
	for _, n := range names {
		if p := r.peers[n]; p.made() {
			made = append(made, p)
		}
	}
	return names, made
}

// Domains returns the names of the linked domains known now.
func (r *Router) Domains() []string {
	names, _ := r.linked()
	return names
}

// ClientFor returns the client of the domain gpath lies in: the home
// client, or the linked domain's (made on first use).
func (r *Router) ClientFor(ctx context.Context, gpath string) (*client.Client, error) {
	_, d, err := r.at(ctx, gpath)
	if err != nil {
		return nil, err
	}
	if d.Client == nil {
		return nil, fmt.Errorf("%s: the domain's namespace is not a client", clean(gpath))
	}
	return d.Client, nil
}

// Counts returns the requests made so far by the home client and the
// clients of linked domains, by kind.
func (r *Router) Counts() map[string]uint64 {
	out := map[string]uint64{}
	if r.home.Client != nil {
		out = r.home.Client.Counts()
	}
	_, made := r.linked()
	for _, p := range made {
		if d, err := p.domain(); err == nil && d.Client != nil {
			for k, v := range d.Client.Counts() {
				out[k] += v
			}
		}
	}
	return out
}

// call runs fn on the domain of gpath: at home as it is, at a linked
// domain bounded by Bound (plus extra).
func call[T any](r *Router, ctx context.Context, gpath string, extra time.Duration, fn func(context.Context, Domain) (T, error)) (T, error) {
	p, d, err := r.at(ctx, gpath)
	if err != nil {
		var zero T
		return zero, err
	}
	if p == nil {
		return fn(ctx, d)
	}
	var v T
	err = p.call(ctx, gpath, r.cfg.Bound+extra, func(ctx context.Context) error {
		var err error
		v, err = fn(ctx, d)
		return err
	})
	return v, err
}

// peer is a linked domain.
type peer struct {
	name string
	link wire.DomainLink
	r    *Router

	mu        sync.Mutex
	dom       *Domain
	closed    bool
	table     []wire.MountEntry // its part of the mount table, as last read (shares renamed)
	reading   chan struct{}     // closed when the table's read under way ends
	down      error             // while marked down: what calls fail with
	downSince time.Time
	probing   bool   // a probe looks for the domain to come back
	lastPath  string // the path of the last call, which the probe asks about
}

func (p *peer) made() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dom != nil
}

// domain returns the linked domain's namespace, made on first use.
func (p *peer) domain() (Domain, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Domain{}, wire.Errorf(wire.CodeNotExist, "/%s: the domain was unlinked", p.name)
	}
	if p.dom != nil {
		return *p.dom, nil
	}
	d, err := p.r.cfg.Peer(p.link)
	if err != nil {
		return Domain{}, fmt.Errorf("linked domain %s: %w", p.name, err)
	}
	d.NS.SetHealthHook(func(ev remote.HealthEvent) {
		ev.Share = p.share(ev.Share)
		p.r.report(ev)
	})
	p.dom = &d
	return d, nil
}

func (p *peer) close() {
	p.mu.Lock()
	d := p.dom
	p.closed, p.dom = true, nil
	p.mu.Unlock()
	if d != nil && d.Close != nil {
		d.Close()
	}
}

// share is the name the vfs knows the domain's share s by.
func (p *peer) share(s string) string { return s + "@" + p.name }

// call runs fn (about gpath) bounded by bound unless the domain is
// marked down: then it fails at once, while a probe in the background
// looks for the domain to come back. A call that runs out of time, or
// that finds no controller of the domain, marks it down; one that the
// domain answers marks it up. A failure that may mean the link changed
// has the links read again at the next use.
func (p *peer) call(ctx context.Context, gpath string, bound time.Duration, fn func(context.Context) error) error {
	p.mu.Lock()
	err := p.down
	p.lastPath = gpath
	p.mu.Unlock()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, bound)
	err = fn(cctx)
	timedOut := err != nil && ctx.Err() == nil && cctx.Err() != nil
	cancel()
	switch {
	case err == nil:
		p.setUp()
	case timedOut:
		err = p.setDown(fmt.Errorf("it did not answer within %v: %w", bound, err))
	case errors.Is(err, client.ErrControllerUnreachable):
		err = p.setDown(err)
	case !errors.Is(err, remote.ErrUnreachable):
		p.setUp() // it answered
	}
	if err != nil && relinks(err) {
		p.r.staleLinks()
	}
	return err
}

// relinks reports whether err may come from a link that changed or went:
// the domain could not be reached, or refused the credentials.
func relinks(err error) bool {
	var we *wire.Error
	if !errors.As(err, &we) {
		return !errors.Is(err, context.Canceled)
	}
	c := we.Code
	return c >= wire.CodeTokenExpired && c <= wire.CodeNoToken || c == wire.CodeNotRegistered
}

// probe asks the domain about the last path called (or, if that lies
// above its shares, the first prefix of its table), every Retry and
// bounded by Bound, until it answers (then it is marked up) or is closed.
func (p *peer) probe() {
	for {
		time.Sleep(p.r.cfg.Retry)
		p.mu.Lock()
		d, g, closed := p.dom, p.lastPath, p.closed
		if closed || d == nil || p.down == nil {
			p.probing = false
			p.mu.Unlock()
			return
		}
		// A path at a share: a directory above the shares is made up
		// without asking anyone.
		if len(p.table) > 0 && remote.Resolve(p.table, clean(g)).Share == "" {
			g = p.table[0].Prefix
		}
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), p.r.cfg.Bound)
		_, err := d.NS.Stat(ctx, g)
		timedOut := ctx.Err() != nil
		cancel()
		if !timedOut && (err == nil || !errors.Is(err, remote.ErrUnreachable) && !errors.Is(err, client.ErrControllerUnreachable)) {
			p.setUp()
		}
	}
}

// setDown marks the domain down with cause and returns the error its
// calls fail with (matching remote.ErrUnreachable).
func (p *peer) setDown(cause error) error {
	err := fmt.Errorf("linked domain %s: %w: %w", p.name, remote.ErrUnreachable, cause)
	p.mu.Lock()
	was := p.down != nil
	p.down = err
	if !was {
		p.downSince = time.Now()
	}
	if !p.probing {
		p.probing = true
		go p.probe()
	}
	shares := p.sharesLocked()
	since := p.downSince
	p.mu.Unlock()
	if !was {
		p.r.cfg.Log.Warn("linked domain unreachable; its cached files are served read-only, marked stale", "domain", p.name, "cause", cause)
		for _, s := range shares {
			p.r.report(remote.HealthEvent{Share: s, Since: since, Err: err})
		}
	}
	return err
}

func (p *peer) setUp() {
	p.mu.Lock()
	was := p.down != nil
	p.down = nil
	shares := p.sharesLocked()
	since := p.downSince
	p.mu.Unlock()
	if was {
		p.r.cfg.Log.Warn("linked domain reachable again", "domain", p.name)
		for _, s := range shares {
			p.r.report(remote.HealthEvent{Share: s, Up: true, Since: since})
		}
	}
}

// downErr returns the error the domain's calls fail with while it is
// marked down (nil while it is up).
func (p *peer) downErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}

// sharesLocked returns the (renamed) shares of the domain's last table;
// p.mu is held.
func (p *peer) sharesLocked() []string {
	var out []string
	for _, m := range p.table {
		if !slices.Contains(out, m.Share) {
			out = append(out, m.Share)
		}
	}
	return out
}

func (r *Router) report(ev remote.HealthEvent) {
	r.mu.Lock()
	fn := r.hook
	r.mu.Unlock()
	if fn != nil {
		fn(ev)
	}
}
