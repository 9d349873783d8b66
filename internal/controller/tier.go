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

// Registry of live controllers.
const (
	pfxCtrl   = "controller/"
	heartbeat = 5 * time.Second
	ctrlAlive = 3 * heartbeat
)

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
		if pp, ok := sc.State.(*peer); ok && pp.id.Role == auth.RoleUser && pp.id.Name == name {
			go sc.End(wire.Errorf(wire.CodeTokenRevoked, "the credentials of %s have been revoked by the domain's administrator; ask an administrator for new ones (pando user add %s)", pp.id, name))
		}
	})
}
