package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"pando.dev/pando/internal/wire"
)

// A gateway follows the controller's revocations, as shares do: when a
// user is revoked, the user's file system at the gateway (its cache
// included, which could otherwise answer from what it holds for the
// rest of its window) is closed and its cache removed, and every
// credential the gateway remembers as checked is forgotten. The user's
// next request finds the controller refusing them.

// followRevocations keeps a watch on the controller's revocations,
// reconnecting with back-off, until ctx ends.
func (g *Gateway) followRevocations(ctx context.Context) {
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		cl, err := g.control()
		if err == nil {
			err = cl.ControllerWatch(ctx, wire.OpWatch, wire.Empty{}, func(meta []byte) error {
				var rev wire.Revocation
				if err := wire.Unmarshal(meta, &rev); err != nil {
					return err
				}
				delay = 100 * time.Millisecond
				g.revoked(rev)
				return nil
			})
		}
		if ctx.Err() != nil {
			return
		}
		g.cfg.Log.Warn("lost the controller's revocation feed; reconnecting", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
}

// revoked acts on one revocation (the feed's first are every revocation
// so far: users not served here are left alone).
func (g *Gateway) revoked(rev wire.Revocation) {
	name, domain, ok := strings.Cut(rev.Principal, "@")
	if rev.Principal == "" || !ok || domain != g.Domain() || strings.Contains(name, ":") {
		if rev.Before != 0 {
			g.forgetCredentials() // everyone's (a domain-wide revocation)
		}
		return
	}
	g.forgetCredentials()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dropLocked(name, rev.Principal)
	for k, b := range g.bearers {
		if b.user == name {
			delete(g.bearers, k)
			g.dropLocked(k, rev.Principal)
		}
	}
}

// dropLocked closes the file system served as name (a user, or a bearer
// session of principal) and removes its cache.
func (g *Gateway) dropLocked(name, principal string) {
	u := g.users[name]
	if u == nil {
		return
	}
	delete(g.users, name)
	ch := make(chan struct{})
	g.closing[name] = ch
	g.cfg.Log.Info("a user served here was revoked; their cache at the gateway is removed", "user", principal)
	go func() {
		u.Close()
		_ = os.RemoveAll(filepath.Join(g.cfg.Cache.Dir, "users", name))
		g.mu.Lock()
		delete(g.closing, name)
		g.mu.Unlock()
		close(ch)
	}()
}

// forgetCredentials forgets every sign-in token, password and S3 key
// checked lately: the next use asks the controller again.
func (g *Gateway) forgetCredentials() {
	for _, c := range []interface{ forget() }{&g.signIns, &g.bearerChecks, &g.ctlPw, &g.ctlKeys} {
		c.forget()
	}
}

func (s *signIns) forget() {
	s.mu.Lock()
	clear(s.ok)
	clear(s.bad)
	s.mu.Unlock()
}

func (p *ctlPasswords) forget() {
	p.mu.Lock()
	clear(p.seen)
	p.mu.Unlock()
}

func (k *ctlS3Keys) forget() {
	k.mu.Lock()
	clear(k.seen)
	k.mu.Unlock()
}
