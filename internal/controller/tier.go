package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/store"
	"pando.dev/pando/internal/wire"
)

// Several controllers serve one domain when they share one etcd store: any
// of them answers any request, since everything they decide from is in the
// store (users, ACLs, mounts, revocations, the CA and token keys), and
// changes that must not race go through the store's compare-and-swap.
// What one controller learns first reaches the others through watches:
// revocations (which each passes on to the shares connected to it, and
// which end the revoked user's connections to it), and the list of live
// controllers (each refreshes its own record every heartbeat).

// EtcdTLS names the files of a TLS connection to etcd (all optional; a
// client certificate needs Cert and Key).
type EtcdTLS struct {
	CA, Cert, Key string
}

// OpenStore opens the store a controller (or an admin command) names: ""
// or "bbolt:DIR" for the bbolt file in a state directory, or
// "etcd://HOST:PORT,...".
func OpenStore(ctx context.Context, spec, stateDir string, et EtcdTLS) (store.Store, error) {
	switch {
	case spec == "" || spec == "bbolt" || strings.HasPrefix(spec, "bbolt:"):
		dir := strings.TrimPrefix(strings.TrimPrefix(spec, "bbolt"), ":")
		if dir == "" {
			dir = stateDir
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("cannot create the state directory: %w", err)
		}
		return store.OpenBolt(filepath.Join(dir, "controller.db"))
	case strings.HasPrefix(spec, "etcd://"):
		tc, err := et.config()
		if err != nil {
			return nil, err
		}
		return store.OpenEtcd(ctx, spec, tc)
	}
	return nil, fmt.Errorf("unknown store %q: use bbolt:DIR or etcd://HOST:2379,HOST:2379", spec)
}

func (et EtcdTLS) config() (*tls.Config, error) {
	if et == (EtcdTLS{}) {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if et.CA != "" {
		pem, err := os.ReadFile(et.CA)
		if err != nil {
			return nil, fmt.Errorf("cannot read the etcd CA: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", et.CA)
		}
	}
	if (et.Cert == "") != (et.Key == "") {
		return nil, errors.New("an etcd client certificate needs both --etcd-cert and --etcd-key")
	}
	if et.Cert != "" {
		cert, err := tls.LoadX509KeyPair(et.Cert, et.Key)
		if err != nil {
			return nil, fmt.Errorf("cannot load the etcd client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Registry of live controllers, and of the shares watching each.
const (
	pfxOnline = "online/" // share name -> onlineRec, from the controller it watches
	pfxCtrl   = "controller/"
	heartbeat = 5 * time.Second
	ctrlAlive = 3 * heartbeat
)

type onlineRec struct {
	Controller string `cbor:"1,keyasint"`
	Seen       int64  `cbor:"2,keyasint"`
}

// markOnline records, for every controller to see, the shares watching
// this one.
func (c *Controller) markOnline(ctx context.Context) {
	c.mu.Lock()
	var names []string
	for name, n := range c.online {
		if n > 0 {
			names = append(names, name)
		}
	}
	c.mu.Unlock()
	now := time.Now().UnixNano()
	for _, name := range names {
		put(ctx, c.st, pfxOnline+name, onlineRec{Controller: c.addr, Seen: now})
	}
}

// markOffline drops share name's presence record if this controller
// wrote it (the share no longer watches it).
func (c *Controller) markOffline(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	b, err := c.st.Get(ctx, pfxOnline+name)
	var r onlineRec
	if err != nil || wire.Unmarshal(b, &r) != nil || r.Controller != c.addr {
		return
	}
	_ = c.st.CompareAndSwap(ctx, pfxOnline+name, b, nil)
}

// shareOnline reports whether share name watches this controller, or
// watched another one at its last heartbeat.
func (c *Controller) shareOnline(ctx context.Context, name string) bool {
	c.mu.Lock()
	here := c.online[name] > 0
	c.mu.Unlock()
	if here {
		return true
	}
	r, err := get[onlineRec](ctx, c.st, pfxOnline+name)
	return err == nil && time.Since(time.Unix(0, r.Seen)) < ctrlAlive
}

type ctrlRec struct {
	Addr string `cbor:"1,keyasint"`
	Seen int64  `cbor:"2,keyasint"`
}

// beat records this controller as live, now and every heartbeat until
// ctx ends, and drops its record then; the channel is closed after that.
func (c *Controller) beat(ctx context.Context) chan struct{} {
	put(ctx, c.st, pfxCtrl+c.addr, ctrlRec{Addr: c.addr, Seen: time.Now().UnixNano()})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(heartbeat)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				c.st.Delete(dctx, pfxCtrl+c.addr)
				cancel()
				return
			case <-t.C:
				if err := put(ctx, c.st, pfxCtrl+c.addr, ctrlRec{Addr: c.addr, Seen: time.Now().UnixNano()}); err != nil && ctx.Err() == nil {
					c.log.Warn("cannot record this controller as live in the store", "err", err)
				}
				c.markOnline(ctx)
			}
		}
	}()
	return done
}

// Controllers lists the addresses of the domain's live controllers, this
// one first.
func (c *Controller) Controllers(ctx context.Context) []string {
	out := []string{c.addr}
	kvs, err := c.st.List(ctx, pfxCtrl)
	if err != nil {
		return out
	}
	now := time.Now()
	for _, kv := range kvs {
		var r ctrlRec
		if wire.Unmarshal(kv.Value, &r) != nil || now.Sub(time.Unix(0, r.Seen)) > ctrlAlive {
			continue
		}
		if !slices.Contains(out, r.Addr) {
			out = append(out, r.Addr)
		}
	}
	slices.Sort(out[1:])
	return out
}

// followRevocations passes every revocation recorded in the store, by
// any controller, to the shares watching this one, and ends this
// controller's connections of a revoked user. A watch that ends early is
// started again, after the shares are sent every revocation once more
// (they may have missed one meanwhile; a revocation applies once however
// often it comes).
func (c *Controller) followRevocations(ctx context.Context) {
	ch := c.st.Watch(ctx, "revoked")
	go func() {
		for {
			for ev := range ch {
				if ev.Deleted {
					continue
				}
				var rev wire.Revocation
				if err := wire.Unmarshal(ev.Value, &rev); err != nil {
					c.log.Warn("a revocation in the store is damaged", "key", ev.Key, "err", err)
					continue
				}
				c.broadcast(rev)
				c.endUser(rev.Principal)
				c.endDomain(rev.Domain)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			ch = c.st.Watch(ctx, "revoked")
			c.resendRevocations(ctx)
		}
	}()
}

func (c *Controller) resendRevocations(ctx context.Context) {
	kvs, err := c.st.List(ctx, pfxRevoked)
	if err != nil {
		return
	}
	if all, err := c.st.Get(ctx, keyRevAll); err == nil {
		kvs = append(kvs, store.KV{Key: keyRevAll, Value: all})
	}
	for _, kv := range kvs {
		var rev wire.Revocation
		if wire.Unmarshal(kv.Value, &rev) == nil {
			c.broadcast(rev)
		}
	}
}

// endUser ends this controller's connections of principal (name@domain).
func (c *Controller) endUser(principal string) {
	name, dom, ok := strings.Cut(principal, "@")
	if !ok || dom != c.keys.domain {
		return
	}
	c.rpc.EachConn(func(sc *rpc.ServerConn) {
		if pp, ok := sc.State.(*peer); ok && (pp.id.Role == auth.RoleUser || pp.id.Role == auth.RoleGateway) && pp.id.Name == name {
			go sc.End(wire.Errorf(wire.CodeTokenRevoked, "the credentials of %s have been revoked by the domain's administrator; ask an administrator for new ones (pando user add %s)", pp.id, name))
		}
	})
}

// status answers OpStatus: the domain's controllers, its store's members
// and its shares, as this controller sees them.
func (c *Controller) status(ctx context.Context, p *peer) (rpc.Reply, error) {
	if _, err := c.require(ctx, p, "/", auth.Admin); err != nil {
		return rpc.Reply{}, err
	}
	out, err := c.health(ctx)
	if err != nil {
		return rpc.Reply{}, err
	}
	return rpc.Reply{Msg: out}, nil
}

// health is what status and the metrics report.
func (c *Controller) health(ctx context.Context) (wire.StatusResp, error) {
	var out wire.StatusResp
	if kvs, err := c.st.List(ctx, pfxCtrl); err == nil {
		for _, kv := range kvs {
			var r ctrlRec
			if wire.Unmarshal(kv.Value, &r) == nil {
				out.Controllers = append(out.Controllers, wire.ControllerInfo{Addr: r.Addr, LastSeen: r.Seen,
					Live: time.Since(time.Unix(0, r.Seen)) < ctrlAlive})
			}
		}
	}
	switch st := c.st.(type) {
	case *store.Etcd:
		out.StoreKind = "etcd"
		ms, err := st.Members(ctx)
		if err != nil {
			out.StoreErr = err.Error()
		}
		for _, m := range ms {
			out.Store = append(out.Store, wire.StoreMember{Name: m.Name, Addr: m.Addr, Leader: m.Leader, Up: m.Up, Err: m.Err})
		}
	default:
		out.StoreKind = "bbolt"
	}
	shares, err := c.shareInfos(ctx)
	if err != nil {
		return wire.StatusResp{}, err
	}
	out.Shares = shares
	return out, nil
}

// mountWatch streams the mount table to a client (agents and gateways
// follow it): the table now, then the whole table again after each
// change, which followMounts learns from the store's watch, whichever
// controller made it. It ends with the connection; a client that falls
// behind is dropped and watches again.
func (c *Controller) mountWatch(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	c.mountWatchers[ch] = struct{}{}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.mountWatchers, ch)
		c.mu.Unlock()
	}()
	for {
		m, err := loadMounts(ctx, c.st)
		if err == nil {
			m, err = c.filterMounts(ctx, p, m)
		}
		if err != nil {
			return rpc.Reply{}, err
		}
		if err := req.Notify(wire.MountListResp{Domain: c.keys.domain, Entries: m, Controllers: c.Controllers(ctx)}); err != nil {
			return rpc.Reply{}, err
		}
		// The table again after each change, and at least every
		// heartbeat: a client that hears nothing for longer knows the
		// stream is stuck (a frozen controller) and reads the table itself.
		select {
		case <-ctx.Done():
			return rpc.Reply{}, nil
		case <-ch:
		case <-time.After(heartbeat):
		}
	}
}

// followMounts tells every mount watcher of this controller that the
// mount table changed, on each change the store's watch reports.
func (c *Controller) followMounts(ctx context.Context) {
	ch := c.st.Watch(ctx, pfxMount)
	go func() {
		for {
			for range ch {
				c.pingMountWatchers()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			// A change may have come while no watch ran: everyone reads
			// the table anew.
			ch = c.st.Watch(ctx, pfxMount)
			c.pingMountWatchers()
		}
	}()
}

func (c *Controller) pingMountWatchers() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for w := range c.mountWatchers {
		select {
		case w <- struct{}{}:
		default: // already told; it reads the table anew
		}
	}
}
