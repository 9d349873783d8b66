package share

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/holder"
	"pando.dev/pando/internal/relay"
	"pando.dev/pando/internal/wire"
)

// RunConfig configures a share that registers with its controller.
type RunConfig struct {
	Name string
	Root string
	// Listen is the address to listen on; with Relay set it may be
	// empty, and the share opens no port at all.
	Listen    string
	Advertise string // address others dial; default the listen address
	// Relay is a relay's host:port (pando relay) the share dials out to
	// and is served through, for a share that cannot accept connections;
	// it registers relay://HOST:PORT/share:NAME@DOMAIN beside any direct
	// address (see package relay).
	Relay string
	// RelayAdvertise is the relay's host:port as clients dial it, where
	// that differs from Relay (default Relay).
	RelayAdvertise string
	// StateDir keeps the share's key and certificate.
	StateDir string
	// Controller overrides the controller address of the credentials.
	Controller string
	// Credentials register the share the first time (an administrator's);
	// afterwards the share uses its own certificate.
	Credentials *config.Config
	Log         *slog.Logger
	// Protection lists the data channel protections allowed (see Config).
	Protection []string
	// Owner and AllowSetID: see Config.
	Owner      string
	AllowSetID bool
	// Limits bound what each principal may hold (see Limits).
	Limits Limits
}

// Running is a started share.
type Running struct {
	*Server
	// Addr is the first of Addrs, the addresses the share registered:
	// the direct one (if it listens), then the relay's (if any).
	Addr   string
	Addrs  []string
	cancel context.CancelFunc
	done   chan struct{}
	ctrl   *client.Client
}

// Start registers the share with its controller and serves it.
func Start(ctx context.Context, rc RunConfig) (*Running, error) {
	if rc.Log == nil {
		rc.Log = slog.New(slog.DiscardHandler)
	}
	if err := auth.ValidName(rc.Name); err != nil {
		return nil, fmt.Errorf("share name: %w", err)
	}
	if fi, err := os.Stat(rc.Root); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("cannot export %s: it is not a directory", rc.Root)
	}
	var ln net.Listener
	var addrs []string
	if rc.Listen != "" || rc.Relay == "" {
		l, err := net.Listen("tcp", rc.Listen)
		if err != nil {
			return nil, fmt.Errorf("share %s cannot listen on %s: %w%s (choose another address with --listen)", rc.Name, rc.Listen, err, holder.InUse(err, rc.Listen))
		}
		ln = l
		addr := ln.Addr().String()
		if rc.Advertise != "" {
			addr = rc.Advertise
		}
		addrs = append(addrs, addr)
	}
	closeLn := func() {
		if ln != nil {
			ln.Close()
		}
	}
	id, err := identity(ctx, rc, addrs)
	if err != nil {
		closeLn()
		return nil, err
	}
	if rc.Relay != "" {
		via, err := relayListener(ctx, rc, id)
		if err != nil {
			closeLn()
			return nil, err
		}
		addrs = append(addrs, via.Addr().String())
		if ln == nil {
			ln = via
		} else {
			ln = relay.Merge(ln, via)
		}
		// A relay forwards what it is given: only TLS data channels keep
		// the bytes from it (docs/security.md, "Relays").
		rc.Protection = []string{"private"}
	}
	ctrl, err := client.New(id, client.Options{})
	if err != nil {
		closeLn()
		return nil, err
	}
	var reg wire.ShareRegisterResp
	if err := ctrl.ControllerCall(ctx, wire.OpShareRegister, wire.ShareRegisterReq{Name: rc.Name, Addrs: addrs}, &reg); err != nil {
		closeLn()
		ctrl.Close()
		return nil, fmt.Errorf("share %s cannot register with the controller: %w", rc.Name, err)
	}
	cert, err := id.Certificate()
	if err != nil {
		closeLn()
		ctrl.Close()
		return nil, err
	}
	pool, err := auth.PoolFromPEM(reg.CA)
	if err != nil {
		closeLn()
		ctrl.Close()
		return nil, err
	}
	trust := auth.NewTrust(reg.Domain, pool)
	srv, err := New(Config{Name: rc.Name, Domain: reg.Domain, Root: rc.Root, Owner: rc.Owner, AllowSetID: rc.AllowSetID,
		TLS: auth.ServerConfigTrust(cert, trust), Trust: trust, TokenKey: ed25519.PublicKey(reg.TokenKey), Log: rc.Log, Identity: id, Protection: rc.Protection,
		DelegFile: delegFileFor(rc.StateDir, rc.Name), Limits: rc.Limits, CommitDir: commitDirFor(rc.StateDir, rc.Name)})
	if err != nil {
		closeLn()
		ctrl.Close()
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	r := &Running{Server: srv, Addr: addrs[0], Addrs: addrs, cancel: cancel, done: make(chan struct{}), ctrl: ctrl}
	// Revocations known so far must be applied before the first request.
	synced := make(chan struct{})
	go r.watch(wctx, synced)
	select {
	case <-synced:
	case <-time.After(10 * time.Second):
		rc.Log.Warn("share serves before it has the controller's revocation list")
	}
	go func() {
		defer close(r.done)
		if err := srv.ServeConns(ln); err != nil {
			rc.Log.Error("share stopped serving", "share", rc.Name, "err", err)
		}
	}()
	rc.Log.Info("share serving", "share", rc.Name, "root", rc.Root, "addrs", addrs)
	return r, nil
}

// Close stops the share.
func (r *Running) Close() error {
	r.cancel()
	err := r.Server.Close()
	<-r.done
	r.ctrl.Close()
	return err
}

// watch keeps a watch on the controller's revocations, reconnecting with
// back-off while the controller is away.
func (r *Running) watch(ctx context.Context, synced chan struct{}) {
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := r.ctrl.ControllerWatch(ctx, wire.OpWatch, wire.Empty{}, func(meta []byte) error {
			var rev wire.Revocation
			if err := wire.Unmarshal(meta, &rev); err != nil {
				return err
			}
			if rev.Marker() {
				if synced != nil {
					close(synced)
					synced = nil
				}
				delay = 100 * time.Millisecond
				return nil
			}
			r.Revoke(rev)
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("lost the controller's revocation feed; reconnecting", "share", r.cfg.Name, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
		// Re-register so the controller knows our address again.
		_ = r.ctrl.ControllerCall(ctx, wire.OpShareRegister, wire.ShareRegisterReq{Name: r.cfg.Name, Addrs: r.Addrs}, nil)
	}
}

// identity loads the share's credentials, or registers the share with the
// administrator's credentials to obtain them.
func identity(ctx context.Context, rc RunConfig, addrs []string) (*config.Config, error) {
	path := filepath.Join(rc.StateDir, "share-"+rc.Name+".json")
	if rc.Controller != "" && rc.Credentials != nil {
		creds := *rc.Credentials
		creds.Controller = rc.Controller
		rc.Credentials = &creds
	}
	id, err := config.Load(path)
	if err == nil && rc.Controller != "" && id.Controller != rc.Controller {
		id.Controller = rc.Controller
		if err := id.Save(path); err != nil {
			return nil, err
		}
	}
	if err == nil && rc.Credentials != nil && id.Domain == rc.Credentials.Domain && id.Controller == rc.Credentials.Controller &&
		!slices.Equal(id.Controllers, rc.Credentials.Controllers) {
		// The domain's controllers, as the administrator's bundle names them.
		id.Controllers = rc.Credentials.Controllers
		if err := id.Save(path); err != nil {
			return nil, err
		}
	}
	if err == nil {
		if rc.Credentials != nil && (id.Domain != rc.Credentials.Domain || id.Controller != rc.Credentials.Controller) {
			// The share moved to another controller address (or domain): keep
			// the key only if the domain is the same.
			if id.Domain == rc.Credentials.Domain {
				id.Controller = rc.Credentials.Controller
				return id, id.Save(path)
			}
		} else {
			return id, nil
		}
	} else if !errors.Is(err, config.ErrNoConfig) {
		return nil, err
	}
	if rc.Credentials == nil {
		return nil, fmt.Errorf("share %s has no certificate yet; run it once with an administrator's credentials (--config)", rc.Name)
	}
	admin, err := client.New(rc.Credentials, client.Options{})
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	key, keyPEM, err := auth.NewKey()
	if err != nil {
		return nil, err
	}
	csr, err := auth.NewCSR(key)
	if err != nil {
		return nil, err
	}
	var reg wire.ShareRegisterResp
	if err := admin.ControllerCall(ctx, wire.OpShareRegister, wire.ShareRegisterReq{Name: rc.Name, Addrs: addrs, CSR: csr}, &reg); err != nil {
		return nil, fmt.Errorf("share %s cannot register with the controller: %w", rc.Name, err)
	}
	id = &config.Config{Domain: reg.Domain, Controller: rc.Credentials.Controller, Controllers: rc.Credentials.Controllers, User: rc.Name,
		CA: string(reg.CA), Cert: string(reg.Cert), Key: string(keyPEM)}
	if err := os.MkdirAll(rc.StateDir, 0o700); err != nil {
		return nil, err
	}
	return id, id.Save(path)
}

// relayListener registers the share with its relay, under the identity
// its certificate names.
func relayListener(ctx context.Context, rc RunConfig, id *config.Config) (*relay.Listener, error) {
	cert, err := id.Certificate()
	if err != nil {
		return nil, err
	}
	name := auth.Identity{Domain: id.Domain, Role: auth.RoleShare, Name: rc.Name}.String()
	l, err := relay.Listen(ctx, relay.ListenConfig{Relay: rc.Relay, Advertise: rc.RelayAdvertise, Name: name, TLS: &tls.Config{Certificates: []tls.Certificate{cert}}, Log: rc.Log})
	if err != nil {
		return nil, fmt.Errorf("share %s cannot be served through the relay: %w", rc.Name, err)
	}
	return l, nil
}
