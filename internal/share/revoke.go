package share

import (
	"strings"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Revocations the controller pushes: principals, certificates, every
// token, and linked domains (their CAs trusted, or a link ended).

// Revoke applies a revocation pushed by the controller and drops the
// connections of revoked certificates.
func (s *Server) Revoke(r wire.Revocation) {
	if r.TrustSet || r.Domain != "" {
		s.relink(r)
		return
	}
	before := time.Unix(0, r.Before)
	s.mu.Lock()
	if r.Principal == "" {
		if before.After(s.revoked.all) {
			s.revoked.all = before
		}
	} else if before.After(s.revoked.before[r.Principal]) {
		s.revoked.before[r.Principal] = before
	}
	for _, sn := range r.Serials {
		s.revoked.serials[sn] = true
	}
	s.mu.Unlock()
	if len(r.Serials) > 0 {
		s.rpc.EachConn(func(c *rpc.ServerConn) {
			if ss, ok := c.State.(*session); ok && s.serialRevoked(ss.serial) {
				go c.End(s.revokedError(ss.peer)) // its last frame may wait behind a reply being sent
			}
		})
	}
}

// relink applies a change of linked domains: the set of CAs trusted, or a
// domain unlinked (its principals' tokens void, their connections ended).
func (s *Server) relink(r wire.Revocation) {
	if r.TrustSet && s.cfg.Trust != nil {
		m := make(map[string][]byte, len(r.Trusted))
		for _, d := range r.Trusted {
			m[d.Name] = d.CA
		}
		if err := s.cfg.Trust.Set(m); err != nil {
			s.cfg.Log.Warn("the controller sent linked domains the share cannot trust; keeping the ones before", "err", err)
		}
	}
	if r.Domain != "" {
		before := time.Unix(0, r.Before)
		s.mu.Lock()
		if before.After(s.revoked.domains[r.Domain]) {
			s.revoked.domains[r.Domain] = before
		}
		s.mu.Unlock()
	}
	s.rpc.EachConn(func(c *rpc.ServerConn) {
		ss, ok := c.State.(*session)
		if !ok || ss.peer.Domain == s.cfg.Domain {
			return
		}
		if ss.peer.Domain == r.Domain || s.cfg.Trust == nil || !s.cfg.Trust.Linked(ss.peer.Domain) {
			go c.End(wire.Errorf(wire.CodeTokenRevoked, "domain %s ended its link with %s; share %s serves %s no more", s.cfg.Domain, ss.peer.Domain, s.cfg.Name, ss.peer))
		}
	})
}

// revokedError refuses a revoked principal: its new connections, and
// its open ones, which end with it.
func (s *Server) revokedError(id auth.Identity) *wire.Error {
	how := ""
	if id.Role == auth.RoleUser {
		how = " (pando user add " + id.Name + ")"
	}
	return wire.Errorf(wire.CodeTokenRevoked, "the credentials of %s have been revoked by the administrator of domain %s, "+
		"and share %s serves them no more; ask an administrator for new ones%s", id, id.Domain, s.cfg.Name, how)
}

func (s *Server) serialRevoked(sn string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.revoked.serials[sn]
}

func (s *Server) checkToken(t *auth.Token) error {
	now := s.cfg.Now()
	if !now.Before(t.Expires) {
		return wire.Errorf(wire.CodeTokenExpired, "your access token for share %s expired at %s; fetch a new one from the controller", s.cfg.Name, t.Expires.UTC().Format(time.RFC3339))
	}
	s.mu.Lock()
	before, all := s.revoked.before[t.Principal], s.revoked.all
	_, dom, _ := strings.Cut(t.Principal, "@")
	unlinked := s.revoked.domains[dom]
	s.mu.Unlock()
	if dom != s.cfg.Domain && t.Issued.Before(unlinked) {
		return wire.Errorf(wire.CodeTokenRevoked, "domain %s ended its link with %s; share %s serves %s no more", s.cfg.Domain, dom, s.cfg.Name, t.Principal)
	}
	if t.Issued.Before(before) {
		return wire.Errorf(wire.CodeTokenRevoked, "the access of %s has been revoked by the domain's administrator", t.Principal)
	}
	if t.Issued.Before(all) {
		return wire.Errorf(wire.CodeTokenRevoked, "your access token for share %s predates an access-control change; fetch a new one", s.cfg.Name)
	}
	return nil
}
