package share

import (
	"crypto/tls"
	"errors"

	"pando.dev/pando/internal/audit"
	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// The share's audit log (internal/audit, docs/security.md "Audit"),
// audit.jsonl in its state directory, holds every request it refuses for
// want of rights (rights.go, and the owner rules of ident.go), every token
// it refuses (expired, invalid, revoked), and every connection it
// refuses. What it grants is recorded where it was decided: at the
// controller that signed the token.

// Audit is the share's audit log (nil: none).
func (s *Server) Audit() *audit.Log { return s.audit }

// refusedRequest reports whether err refuses a principal's request, and
// returns it.
func refusedRequest(err error) (*wire.Error, bool) {
	var we *wire.Error
	if !errors.As(err, &we) {
		return nil, false
	}
	switch we.Code {
	case wire.CodeAccess, wire.CodeTokenExpired, wire.CodeTokenInvalid, wire.CodeTokenRevoked:
		return we, true // (CodeNoToken is a session's state, which a client mends by itself)
	case wire.CodePerm:
		return we, we.Missing != "" // a right missing, not a file system's EPERM
	}
	return nil, false
}

// audited records req's refusal, if err is one.
func (s *Server) audited(req *rpc.Request, err error) {
	if err == nil || s.audit == nil {
		return
	}
	we, ok := refusedRequest(err)
	if !ok {
		return
	}
	r := audit.Record{Who: peerOf(req.Conn), Action: req.Op.String(), Rights: we.Missing, Result: audit.Refused,
		From: req.Conn.From(), Domain: s.cfg.Domain, Server: s.self(), Detail: we.Message}
	if len(we.Paths) > 0 {
		r.Path = we.Paths[0]
	}
	switch we.Code {
	case wire.CodeTokenExpired, wire.CodeTokenInvalid, wire.CodeTokenRevoked:
		r.Action = audit.ActionToken
	}
	s.audit.Write(r)
}

// connRefused records a connection Opened refused.
func (s *Server) connRefused(c *rpc.ServerConn, err error) {
	who := peerOf(c)
	if who == "" && !rpc.IsPlain(c.Channel) {
		if id, _, err := auth.PeerIdentity(c.TLSState()); err == nil {
			who = id.String()
		}
	}
	s.audit.Write(audit.Record{Who: who, Action: audit.ActionConnect, Result: audit.Refused, From: c.From(),
		Domain: s.cfg.Domain, Server: s.self(), Detail: wire.FromError(err).Message})
}

// self is the share's principal, which writes its records (shares that
// keep one state directory write one log).
func (s *Server) self() string {
	return auth.Identity{Domain: s.cfg.Domain, Role: auth.RoleShare, Name: s.cfg.Name}.String()
}

// auditHandshakes returns base, whose VerifyConnection checks client
// certificates, made to record each certificate it refuses (another
// domain's, not linked; one its domain's CA did not issue), with the
// address it came from: such a connection never reaches Opened.
func (s *Server) auditHandshakes(base *tls.Config) *tls.Config {
	verify := base.VerifyConnection
	out := base.Clone()
	out.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		from := ""
		if hi.Conn != nil && hi.Conn.RemoteAddr() != nil {
			from = hi.Conn.RemoteAddr().String()
		}
		c := base.Clone()
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			err := verify(cs)
			if err != nil {
				who := ""
				if len(cs.PeerCertificates) > 0 {
					if id, ierr := auth.IdentityFromCert(cs.PeerCertificates[0]); ierr == nil {
						who = id.String()
					}
				}
				s.audit.Write(audit.Record{Who: who, Action: audit.ActionConnect, Result: audit.Refused, From: from,
					Domain: s.cfg.Domain, Server: s.self(), Detail: err.Error()})
			}
			return err
		}
		return c, nil
	}
	return out
}

// peerOf is the principal of a connection, "" before it is known.
func peerOf(c *rpc.ServerConn) string {
	if ss, ok := c.State.(*session); ok {
		return ss.peer.String()
	}
	return ""
}
