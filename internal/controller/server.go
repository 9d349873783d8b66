package controller

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"pando.dev/pando/internal/audit"
	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/holder"
	"pando.dev/pando/internal/relay"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/store"
	"pando.dev/pando/internal/wire"
)

// Config configures a controller.
type Config struct {
	StateDir string
	Domain   string // required at first start
	Listen   string // host:port; may be empty with Relay: then no port is opened
	// Relay is a relay's host:port (pando relay) the controller dials out
	// to and is served through, registered as controller@DOMAIN (see
	// package relay); without Listen it is the only way in.
	Relay string
	// Advertise is the address written into client configurations
	// (default: the listen address).
	Advertise string
	TokenTTL  time.Duration // default 10 minutes
	// CertTTL is how long the certificates of users and gateways last
	// (default 2 years); clients renew theirs when a third is left.
	CertTTL time.Duration
	Log     *slog.Logger
	// Store names the store: "" for bbolt in StateDir, or
	// "etcd://HOST:PORT,..." (see OpenStore), shared by every controller
	// of the domain.
	Store string
	Etcd  EtcdTLS
}

// Controller is a running controller.
type Controller struct {
	cfg   Config
	st    store.Store
	keys  *keys
	rpc   rpc.Server
	ln    net.Listener
	log   *slog.Logger
	addr  string
	admin string // path of the admin credential bundle
	audit *audit.Log

	stop      context.CancelFunc // ends the heartbeat and the watches
	done      chan struct{}      // closed by Close
	beats     chan struct{}      // closed once the heartbeat has ended
	closeOnce sync.Once
	closeErr  error // what Close returned

	mu            sync.Mutex
	watchers      map[*watcher]struct{}
	mountWatchers map[chan struct{}]struct{}
	online        map[string]int // share name -> watch connections
	contact       contacts       // linked domains' controllers
}

type watcher struct {
	share string // "" for a gateway
	who   string
	ch    chan wire.Revocation
}

// AdminBundle is the file name of the administrator's credentials in the
// state directory.
const AdminBundle = "admin.json"

// Start opens the state, creates the domain on first start and listens.
func Start(ctx context.Context, cfg Config) (*Controller, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = 10 * time.Minute
	}
	if cfg.CertTTL <= 0 {
		cfg.CertTTL = 2 * 365 * 24 * time.Hour
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create the state directory: %w", err)
	}
	st, err := OpenStore(ctx, cfg.Store, cfg.StateDir, cfg.Etcd)
	if err != nil {
		return nil, err
	}
	c, err := start(ctx, cfg, st)
	if err != nil {
		st.Close()
		return nil, err
	}
	return c, nil
}

func start(ctx context.Context, cfg Config, st store.Store) (*Controller, error) {
	k, created, err := initDomain(ctx, st, cfg.Domain)
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	addr, listen := "", ""
	if cfg.Listen != "" || cfg.Relay == "" {
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("the controller cannot listen on %s: %w%s (choose another address with --listen)", cfg.Listen, err, holder.InUse(err, cfg.Listen))
		}
		addr, listen = ln.Addr().String(), ln.Addr().String()
	}
	c := &Controller{cfg: cfg, st: st, keys: k, log: cfg.Log,
		watchers: make(map[*watcher]struct{}), mountWatchers: make(map[chan struct{}]struct{}), online: make(map[string]int)}
	cert, err := c.serverCert(listen)
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, err
	}
	if cfg.Relay != "" {
		via, err := relay.Listen(ctx, relay.ListenConfig{Relay: cfg.Relay, Log: cfg.Log,
			Name: auth.Identity{Domain: k.domain, Role: auth.RoleController, Name: "controller"}.String(),
			TLS:  &tls.Config{Certificates: []tls.Certificate{cert}}})
		if err != nil {
			if ln != nil {
				ln.Close()
			}
			return nil, fmt.Errorf("the controller cannot be served through the relay: %w", err)
		}
		if ln == nil {
			ln, addr = via, via.Addr().String()
		} else {
			ln = relay.Merge(ln, via)
		}
	}
	if cfg.Advertise != "" {
		addr = cfg.Advertise
	}
	c.addr = addr
	if c.audit, err = audit.Open(filepath.Join(cfg.StateDir, audit.FileName), audit.Options{
		Server: "controller@" + k.domain, Domain: k.domain, Log: cfg.Log}); err != nil {
		ln.Close()
		return nil, err
	}
	// Client certificates are checked in Opened, against the CA of the
	// domain each names: the home CA, a linked domain's, or none yet for
	// a controller that comes to redeem an invitation.
	tlsConf := auth.ServerConfig(cert, k.ca.Pool())
	tlsConf.ClientAuth = tls.RequireAnyClientCert
	tlsConf.ClientCAs = nil // a client sends its certificate only if the request names no CA, or its own
	c.rpc = rpc.Server{Handler: c, Hooks: c, Log: cfg.Log, MaxInFlight: 64, TLS: tlsConf}
	c.ln = tls.NewListener(ln, c.rpc.TLS)
	c.admin = filepath.Join(cfg.StateDir, AdminBundle)
	if err := c.writeAdminBundle(ctx, created); err != nil {
		ln.Close()
		c.audit.Close()
		return nil, err
	}
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	c.stop, c.done = stop, make(chan struct{})
	c.followRevocations(bg)
	c.followMounts(bg)
	c.beats = c.beat(bg)
	go func() {
		if err := c.rpc.Serve(c.ln); err != nil {
			c.log.Error("controller stopped serving", "err", err)
		}
	}()
	c.log.Info("controller serving", "domain", k.domain, "addr", addr, "new", created)
	return c, nil
}

// Addr is the address clients should dial.
func (c *Controller) Addr() string { return c.addr }

// Domain is the domain's name.
func (c *Controller) Domain() string { return c.keys.domain }

// AdminBundlePath is where the administrator's credentials are.
func (c *Controller) AdminBundlePath() string { return c.admin }

// Close stops serving and closes the store. Closing again does nothing
// more (and returns the same error).
func (c *Controller) Close() error {
	c.closeOnce.Do(func() {
		err := c.rpc.Close()
		c.stop()
		close(c.done)
		<-c.beats // it drops this controller's record from the registry
		if cerr := c.st.Close(); err == nil {
			err = cerr
		}
		c.audit.Close()
		c.closeErr = err
	})
	return c.closeErr
}

func (c *Controller) serverCert(listen string) (tls.Certificate, error) {
	host, _, _ := net.SplitHostPort(listen)
	hosts := []string{"localhost", "127.0.0.1"}
	if host != "" && host != "0.0.0.0" && host != "::" {
		hosts = append(hosts, host)
	}
	key, keyPEM, err := auth.NewKey()
	if err != nil {
		return tls.Certificate{}, err
	}
	id := auth.Identity{Domain: c.keys.domain, Role: auth.RoleController, Name: "controller"}
	certPEM, _, err := c.keys.ca.Issue(id, key.Public(), 90*24*time.Hour, hosts)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// writeAdminBundle writes the administrator's credentials at first start,
// and keeps the controller address in it current afterwards.
func (c *Controller) writeAdminBundle(ctx context.Context, created bool) error {
	if !created {
		cfg, err := config.Load(c.admin)
		if err == nil {
			ctrls := c.Controllers(ctx)[1:]
			if cfg.Controller != c.addr || !slices.Equal(cfg.Controllers, ctrls) {
				cfg.Controller, cfg.Controllers = c.addr, ctrls
				return cfg.Save(c.admin)
			}
			return nil
		}
		if !errors.Is(err, config.ErrNoConfig) {
			return err
		}
	}
	resp, err := c.issueUser(ctx, "admin", nil, true, false)
	if err != nil {
		return err
	}
	cfg := &config.Config{Domain: c.keys.domain, Controller: c.addr, Controllers: c.Controllers(ctx)[1:], User: "admin",
		CA: string(resp.CA), Cert: string(resp.Cert), Key: string(resp.Key)}
	return cfg.Save(c.admin)
}

// Opened identifies a new connection and refuses revoked principals,
// recording each refusal in the audit log.
func (c *Controller) Opened(sc *rpc.ServerConn) error {
	err := c.opened(sc)
	if err != nil {
		c.connRefused(sc, err)
	}
	return err
}

func (c *Controller) opened(sc *rpc.ServerConn) error {
	id, cert, err := auth.PeerIdentity(sc.TLSState())
	if err != nil {
		return wire.Errorf(wire.CodeTokenInvalid, "the controller cannot identify your certificate: %v", err)
	}
	chain := sc.TLSState().PeerCertificates
	ctx := context.Background()
	if id.Domain != c.keys.domain {
		return c.openedRemote(ctx, sc, id, chain)
	}
	if _, err := auth.NewTrust(c.keys.domain, c.keys.ca.Pool()).Verify(chain, x509.ExtKeyUsageClientAuth); err != nil {
		return wire.Errorf(wire.CodeTokenInvalid, "the controller of %s refused your certificate: %v", c.keys.domain, err)
	}
	serial := cert.SerialNumber.Text(16)
	switch id.Role {
	case auth.RoleUser, auth.RoleGateway:
		u, err := get[userRec](ctx, c.st, pfxUser+id.Name)
		if err != nil || u.Gateway != (id.Role == auth.RoleGateway) {
			return wire.Errorf(wire.CodeNotRegistered, "%s is not known to the controller", id)
		}
		if u.Revoked != 0 || !slices.Contains(u.Serials, serial) {
			return wire.Errorf(wire.CodeTokenRevoked, "the credentials of %s have been revoked", id)
		}
	case auth.RoleShare:
	default:
		return wire.Errorf(wire.CodeTokenInvalid, "%s may not call the controller", id)
	}
	sc.State = &peer{id: id, serial: serial}
	return nil
}

// Closed forgets a connection.
func (c *Controller) Closed(*rpc.ServerConn) {}

type peer struct {
	id     auth.Identity
	serial string
	// chain is the certificate chain presented (a stranger's is checked
	// when it redeems an invitation).
	chain []*x509.Certificate
	// stranger: a domain not linked (yet), which may only ask the
	// domain's hello and redeem an invitation.
	stranger bool
}

// openedRemote identifies a connection of another domain's principal: a
// linked domain's, whose CA must have issued its certificate, or a
// stranger's.
func (c *Controller) openedRemote(ctx context.Context, sc *rpc.ServerConn, id auth.Identity, chain []*x509.Certificate) error {
	l, err := c.linkOf(ctx, id.Domain)
	if err != nil {
		return err
	}
	if l == nil {
		sc.State = &peer{id: id, chain: chain, stranger: true}
		return nil
	}
	if _, err := verifyChain(chain, l.CA, id.Domain); err != nil {
		return wire.Errorf(wire.CodeTokenInvalid, "the controller of %s refused your certificate: %v", c.keys.domain, err)
	}
	switch id.Role {
	case auth.RoleUser, auth.RoleGateway, auth.RoleController:
	default:
		return wire.Errorf(wire.CodeTokenInvalid, "%s may not call the controller of %s", id, c.keys.domain)
	}
	sc.State = &peer{id: id, serial: chain[0].SerialNumber.Text(16), chain: chain}
	return nil
}

// broadcast sends a revocation to every watching share.
func (c *Controller) broadcast(r wire.Revocation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for w := range c.watchers {
		select {
		case w.ch <- r:
		default:
			c.log.Warn("a watcher is not keeping up with revocations; it will resync", "watcher", w.who)
		}
	}
}

func splitHost(addr string) (string, string, error) { return net.SplitHostPort(addr) }

// controllerAddr reports whether a is an address a controller may be
// dialled at: HOST:PORT, or a relay's relay://HOST:PORT/NAME.
func controllerAddr(a string) bool {
	if len(a) > 255 {
		return false
	}
	if relay.IsAddr(a) {
		_, _, err := relay.ParseAddr(a)
		return err == nil
	}
	_, _, err := splitHost(a)
	return err == nil
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
