// Package gateway serves the namespace to clients that cannot mount it:
// HTTP(S) and WebDAV (web.Server), S3 (web.S3), NFSv3 (nfs) and SMB 3
// (Samba in front of one pando mount per user), each request with the
// rights of the person who made it.
//
// A gateway holds credentials of the gateway role, which carry no rights
// of their own. For every user it signs in it keeps a client that asks
// the controller for tokens in that user's name (wire.ResolveReq.For):
// the controller signs them with the user's rights and names the gateway
// as the one that may present them, and shares check them as they check
// any token. Each user has a cache and vfs of their own below the
// gateway's cache directory (at most Config.MaxUsers at once, the one
// idle longest closed to make room), so that nothing one user fetched is
// ever served to another without their own rights being checked.
//
// People sign in with a user certificate of the domain, a sign-in token
// the controller checks (signin.go), or a password or S3 key: those the
// controller keeps (ctlcreds.go), or those of a file the gateway's
// operator keeps (secretFile: mode 0600, read again when it changes). An
// NFS export is served as one principal to the networks listed; SMB users
// are those of the SMB password file. A user the controller revokes is
// closed at once, their cache removed (revoke.go).
package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/nfs"
	"pando.dev/pando/internal/private"
	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/web"
	"pando.dev/pando/internal/wire"
)

// Config configures a gateway.
type Config struct {
	// Client holds the gateway's credentials (pando user add NAME --gateway).
	Client *config.Config
	// Cache is the template of each user's cache: Dir is the gateway's
	// cache directory, below which each user gets one.
	Cache cache.Options
	VFS   vfs.Options
	Log   *slog.Logger
	// MaxUsers bounds the users served at once (default 64); the one
	// idle longest is closed to make room.
	MaxUsers int
}

// Gateway is the state shared by a gateway's protocol front ends.
type Gateway struct {
	cfg  Config
	id   auth.Identity
	pool *x509.CertPool
	cert tls.Certificate

	mu      sync.Mutex
	users   map[string]*userFS
	closing map[string]chan struct{} // users being closed: closed when done
	closed  bool
	servers []*web.Server
	nfs     []*nfs.Server

	// Counters count the requests of the gateway's front ends; NFS,
	// those of its NFS front end.
	Counters web.Counters
	NFS      nfs.Counters

	signIns      signIns
	bearerChecks signIns
	bearers      map[string]bearerSession // by session name (bearer.go), under mu
	ctlMu        sync.Mutex
	ctl          *client.Client // the gateway's own (control)
	ctlPw        ctlPasswords
	ctlKeys      ctlS3Keys
	// stopWatch ends followRevocations, which closes watched.
	stopWatch func()
	watched   chan struct{}
}

type userFS struct {
	*private.Private
	cache *cache.Cache // the Private's, for the gateway's figures
	used  time.Time
	refs  int
}

// ErrNotGateway: the credentials given are not a gateway's.
var ErrNotGateway = errors.New("not a gateway's credentials")

// New checks the gateway's credentials; users are served from the first
// request that names them.
func New(cfg Config) (*Gateway, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxUsers <= 0 {
		cfg.MaxUsers = 64
	}
	cert, err := tls.X509KeyPair([]byte(cfg.Client.Cert), []byte(cfg.Client.Key))
	if err != nil {
		return nil, fmt.Errorf("the gateway's credentials: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("the gateway's certificate: %w", err)
	}
	id, err := auth.IdentityFromCert(leaf)
	if err != nil {
		return nil, fmt.Errorf("the gateway's certificate: %w", err)
	}
	if id.Role != auth.RoleGateway {
		return nil, fmt.Errorf("%w: the credentials given are those of %s; a gateway needs its own, made with `pando user add NAME --gateway`", ErrNotGateway, id)
	}
	pool, err := auth.PoolFromPEM([]byte(cfg.Client.CA))
	if err != nil {
		return nil, fmt.Errorf("the domain's CA: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Cache.Dir, "users"), 0o700); err != nil {
		return nil, fmt.Errorf("the gateway's cache directory: %w", err)
	}
	// Bodies of PUTs being received; none outlives its request.
	os.RemoveAll(filepath.Join(cfg.Cache.Dir, "put-spool"))
	if err := os.MkdirAll(filepath.Join(cfg.Cache.Dir, "put-spool"), 0o700); err != nil {
		return nil, fmt.Errorf("the gateway's cache directory: %w", err)
	}
	g := &Gateway{cfg: cfg, id: id, pool: pool, cert: cert, users: make(map[string]*userFS), closing: make(map[string]chan struct{}), bearers: make(map[string]bearerSession)}
	ctx, cancel := context.WithCancel(context.Background())
	g.stopWatch = cancel
	g.watched = make(chan struct{})
	go func() {
		defer close(g.watched)
		g.followRevocations(ctx)
	}()
	return g, nil
}

// Identity is the gateway's own identity.
func (g *Gateway) Identity() auth.Identity { return g.id }

// Domain is the domain the gateway serves.
func (g *Gateway) Domain() string { return g.cfg.Client.Domain }

// CAPool is the domain's CA, which issued the user certificates a
// gateway accepts.
func (g *Gateway) CAPool() *x509.CertPool { return g.pool }

// TLSConfig is the TLS configuration of a front end that presents
// cert and asks for (without requiring) a client certificate of the
// domain's CA.
func (g *Gateway) TLSConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    g.pool,
		MinVersion:   tls.VersionTLS12,
	}
}

// S3Options configures the S3 front end of a gateway.
type S3Options struct {
	// Keys are the access keys; nil: the keys the controller keeps
	// (pando user s3-key).
	Keys *S3Keys
	// HostSuffix, if set, makes <bucket>.<HostSuffix> virtual-host-style
	// names.
	HostSuffix string
	// Buckets is the global path of the folder whose directories are the
	// buckets, made and removed over S3; "": the names below the domain.
	Buckets string
}

// StartS3 serves the namespace's buckets over S3 on ln (TLS with cert,
// or clear text if cert is nil), until ln is closed.
func (g *Gateway) StartS3(ln net.Listener, cert *tls.Certificate, o S3Options) error {
	var ks web.S3Keys = o.Keys
	if o.Keys == nil {
		g.ctlKeys.g = g
		ks = &g.ctlKeys
	} else {
		o.Keys.file.tell(g.cfg.Log)
	}
	srv, err := web.NewS3(g, ks, web.S3Options{Domain: g.Domain(), HostSuffix: o.HostSuffix, Buckets: o.Buckets,
		Spool: filepath.Join(g.cfg.Cache.Dir, "s3-spool")}, &g.Counters, g.cfg.Log)
	if err != nil {
		return err
	}
	var tc *tls.Config
	if cert != nil {
		tc = g.TLSConfig(*cert)
		tc.ClientAuth = tls.NoClientCert
	}
	go srv.Serve(ln, tc)
	return nil
}

// Serve serves the namespace over HTTP (with WebDAV if dav) on ln: over
// TLS with cert, or in clear text if cert is nil (which the caller allows
// on loopback only), signing people in with authn.
func (g *Gateway) Serve(ln net.Listener, cert *tls.Certificate, authn *Authenticator, dav bool) error {
	srv := web.NewServer(g, authn, g.Domain(), dav, &g.Counters, g.cfg.Log, g)
	srv.Spool = filepath.Join(g.cfg.Cache.Dir, "put-spool")
	g.mu.Lock()
	g.servers = append(g.servers, srv)
	g.mu.Unlock()
	if cert == nil {
		authn.PlainOK = true
		return srv.Serve(ln, nil)
	}
	return srv.Serve(ln, g.TLSConfig(*cert))
}

// Acquire returns user's file system, made at first use; release it with
// Release when the request is done.
func (g *Gateway) Acquire(ctx context.Context, user string) (*vfs.FS, error) {
	u, err := g.acquire(ctx, user)
	if err != nil {
		return nil, err
	}
	return u.FS, nil
}

// acquire is Acquire, with the client and cache the gateway opened for
// user beside the vfs over them.
func (g *Gateway) acquire(ctx context.Context, user string) (*userFS, error) {
	ctl, err := g.control() // its certificate, renewed, is the one every user's client presents
	if err != nil {
		return nil, err
	}
	opts := client.Options{ActFor: user, KeepFresh: true, Log: g.cfg.Log, CertOf: ctl}
	g.mu.Lock()
	defer g.mu.Unlock()
	if strings.HasPrefix(user, bearerPrefix) {
		b, ok := g.bearers[user]
		if !ok {
			return nil, errors.New("the gateway no longer holds this bearer token; send it again")
		}
		opts.ActFor, opts.Bearer, opts.BearerFor = "", b.token, b.principal
	} else if err := auth.ValidName(user); err != nil {
		return nil, fmt.Errorf("user name: %w", err)
	}
	for g.closing[user] != nil {
		// Its cache is being closed: it is opened again once it is.
		ch := g.closing[user]
		g.mu.Unlock()
		<-ch
		g.mu.Lock()
	}
	if g.closed {
		return nil, errors.New("the gateway is closing")
	}
	if u := g.users[user]; u != nil {
		u.refs++
		u.used = time.Now()
		return u, nil
	}
	g.evictLocked()
	copts := g.cfg.Cache
	copts.Dir = filepath.Join(g.cfg.Cache.Dir, "users", user)
	copts.Log = g.cfg.Log
	ch, err := cache.Open(copts)
	if err != nil {
		return nil, err
	}
	p, err := private.Open(g.cfg.Client, opts, ch, g.cfg.VFS, g.cfg.Log)
	if err != nil {
		return nil, err
	}
	u := &userFS{Private: p, cache: ch, used: time.Now(), refs: 1}
	g.users[user] = u
	return u, nil
}

// Release ends a request's use of user's file system.
func (g *Gateway) Release(user string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if u := g.users[user]; u != nil {
		u.refs--
	}
}

// evictLocked closes the user idle longest while there are too many.
func (g *Gateway) evictLocked() {
	for len(g.users) >= g.cfg.MaxUsers {
		var oldest string
		for name, u := range g.users {
			if u.refs == 0 && (oldest == "" || u.used.Before(g.users[oldest].used)) {
				oldest = name
			}
		}
		if oldest == "" {
			return // all busy: serve one more for now
		}
		u := g.users[oldest]
		delete(g.users, oldest)
		ch := make(chan struct{})
		g.closing[oldest] = ch
		go func() {
			u.Close()
			g.mu.Lock()
			delete(g.closing, oldest)
			g.mu.Unlock()
			close(ch)
		}()
	}
}

// ACL returns the ACLs that apply on p, with user's rights there, as the
// controller tells the gateway in user's name.
func (g *Gateway) ACL(ctx context.Context, user, p string) (wire.ACLResp, error) {
	u, err := g.acquire(ctx, user)
	if err != nil {
		return wire.ACLResp{}, err
	}
	defer g.Release(user)
	c, err := u.Router().ClientFor(ctx, p) // the ACLs of a linked domain's path are its controller's
	if err != nil {
		return wire.ACLResp{}, err
	}
	return c.Admin().ACLGet(ctx, p)
}

// Status is what the web page's status shows to user: the gateway's
// figures, the domain's shares, and their health as user's vfs sees it.
func (g *Gateway) Status(ctx context.Context, user string) (web.PageStatus, error) {
	u, err := g.acquire(ctx, user)
	if err != nil {
		return web.PageStatus{}, err
	}
	defer g.Release(user)
	st := g.Stats()
	out := web.PageStatus{Gateway: g.id.String(), RPCs: st.RPCs, Health: u.Shares()}
	out.Figures = [][2]string{
		{"users served", fmt.Sprint(st.Users)},
		{"requests", fmt.Sprint(st.Requests)},
		{"refused", fmt.Sprint(st.Refused)},
		{"unauthenticated", fmt.Sprint(st.Unauthenticated)},
		{"cache hits", fmt.Sprint(st.Cache.Hits)},
		{"cache misses", fmt.Sprint(st.Cache.Misses)},
		{"bytes fetched", fmt.Sprint(st.Cache.BytesFetched)},
		{"cache on disk", fmt.Sprint(st.Cache.DiskBytes)},
		{"cache in memory", fmt.Sprint(st.Cache.MemoryBytes)},
		{"files cached", fmt.Sprint(st.Cache.Files)},
		{"opens read from the cache file", fmt.Sprint(st.Direct)},
	}
	out.Shares, err = u.Client().Admin().ShareList(ctx)
	return out, err
}

// Stats sums the users' caches and RPC counts.
type Stats struct {
	Users           int               `json:"users"`
	Requests        int64             `json:"requests"`
	Refused         int64             `json:"refused"`
	Unauthenticated int64             `json:"unauthenticated"`
	Direct          int64             `json:"direct_opens"`
	RPCs            map[string]uint64 `json:"rpcs"`
	Cache           cache.Stats       `json:"cache"`
	NFS             NFSStats          `json:"nfs"`
}

// NFSStats are the figures of an NFS front end.
type NFSStats struct {
	BadCalls     int64 `json:"bad_calls"`     // malformed calls (their connection closed)
	ConnsRefused int64 `json:"conns_refused"` // from networks not allowed, or past the bound
	BytesRead    int64 `json:"bytes_read"`
	BytesWritten int64 `json:"bytes_written"`
}

// Stats returns the gateway's figures.
func (g *Gateway) Stats() Stats {
	s := Stats{Requests: g.Counters.Requests.Load() + g.NFS.Requests.Load(), Refused: g.Counters.Refused.Load() + g.NFS.Refused.Load(),
		Unauthenticated: g.Counters.Unauthenticated.Load(), Direct: g.Counters.Direct.Load(), RPCs: map[string]uint64{},
		NFS: NFSStats{BadCalls: g.NFS.BadRecords.Load(), ConnsRefused: g.NFS.ConnsRefused.Load(), BytesRead: g.NFS.BytesRead.Load(), BytesWritten: g.NFS.BytesWritten.Load()}}
	g.mu.Lock()
	defer g.mu.Unlock()
	s.Users = len(g.users)
	for _, u := range g.users {
		for k, n := range u.Router().Counts() {
			s.RPCs[k] += n
		}
		cs := u.cache.Stats()
		s.Cache.Hits += cs.Hits
		s.Cache.Misses += cs.Misses
		s.Cache.Fetches += cs.Fetches
		s.Cache.BytesFetched += cs.BytesFetched
		s.Cache.DiskBytes += cs.DiskBytes
		s.Cache.MemoryBytes += cs.MemoryBytes
		s.Cache.Files += cs.Files
	}
	return s
}

// Close closes every user's file system, sending what they hold.
func (g *Gateway) Close() {
	g.mu.Lock()
	servers, nfss := g.servers, g.nfs
	g.mu.Unlock()
	for _, s := range servers {
		s.Close()
	}
	for _, s := range nfss {
		s.Close() // sends what its open files hold, through the users' vfs
	}
	g.stopWatch()
	<-g.watched
	g.closeControl()
	g.mu.Lock()
	users := g.users
	g.users, g.closed = nil, true
	g.mu.Unlock()
	for _, u := range users {
		u.Close()
	}
	for {
		g.mu.Lock()
		var ch chan struct{}
		for _, c := range g.closing {
			ch = c
			break
		}
		g.mu.Unlock()
		if ch == nil {
			return
		}
		<-ch
	}
}
