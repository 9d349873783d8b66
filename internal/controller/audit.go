package controller

import (
	"errors"
	"fmt"
	"strings"

	"pando.dev/pando/internal/audit"
	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// The controller's audit log (internal/audit, docs/security.md "Audit"),
// audit.jsonl in its state directory, holds: every token it signs at a
// resolve (a grant, with the rights at the token's root); every request
// and connection it refuses to a principal for want of rights or of
// valid credentials (the codes in refusal); every administrative change
// it makes, links to other domains included, and every group assertion
// it signs for a linked domain (the ops in changes). Audit lets other
// code add records.

// Audit is the controller's audit log, for records of its own kind (link
// changes: audit.Record{Action: audit.ActionDomainLink, ...}); Server,
// Domain and Time are filled in.
func (c *Controller) Audit() *audit.Log { return c.audit }

// changes are the ops whose success the log records: the changes, and
// the group assertions this domain signs for its users to present to a
// linked one.
var changes = map[wire.Op]bool{
	wire.OpDomainAssert: true,
	wire.OpUserAdd:      true, wire.OpUserRevoke: true, wire.OpUserPasswd: true, wire.OpACLSet: true,
	wire.OpMountAdd: true, wire.OpMountRemove: true, wire.OpShareRegister: true, wire.OpTokenCreate: true,
	wire.OpDomainLink: true, wire.OpDomainUnlink: true, wire.OpDomainInvite: true, wire.OpDomainJoin: true,
	wire.OpIssuerTrust: true, wire.OpIssuerDistrust: true, wire.OpCertRenew: true,
}

// refusal reports whether err refuses a principal (rather than failing
// its request), and returns its message and the rights it misses.
func refusal(err error) (*wire.Error, bool) {
	var we *wire.Error
	if !errors.As(err, &we) {
		return nil, false
	}
	switch we.Code {
	case wire.CodeAccess, wire.CodeNotRegistered, wire.CodeTokenRevoked, wire.CodeTokenInvalid:
		return we, true
	}
	return nil, false
}

// audited records the outcome of req, served for p, if the log keeps it.
func (c *Controller) audited(p *peer, req *rpc.Request, err error) {
	if c.audit == nil || req.Op == wire.OpResolve && err == nil { // resolve records its grants
		return
	}
	we, refused := refusal(err)
	if !refused && (err != nil || !changes[req.Op]) {
		return
	}
	path, detail := describe(req)
	r := audit.Record{Who: p.id.String(), Action: req.Op.String(), Path: path, Result: audit.Granted,
		From: req.Conn.From(), Detail: detail}
	if refused {
		r.Result, r.Rights, r.Detail = audit.Refused, we.Missing, we.Message
	}
	c.audit.Write(r)
}

// describe reads what a request names, for its record: the global path
// it concerns, and its arguments (never a secret: a password's change
// names only the user).
func describe(req *rpc.Request) (path, detail string) {
	switch req.Op {
	case wire.OpResolve:
		if r, ok := decoded[wire.ResolveReq](req); ok {
			return r.Path, ""
		}
	case wire.OpACLGet:
		if r, ok := decoded[wire.ACLGetReq](req); ok {
			return r.Path, ""
		}
	case wire.OpACLSet:
		if r, ok := decoded[wire.ACLSetReq](req); ok {
			es := make([]string, 0, len(r.Entries))
			for _, e := range r.Entries {
				rights := e.Rights
				if parsed, err := auth.ParseRights(rights); err == nil {
					rights = parsed.String()
				}
				s := e.Who + ":" + rights
				if e.Negative {
					s = "-" + s
				}
				es = append(es, s)
			}
			how := "set"
			if r.Replace {
				how = "replaced by"
			}
			return r.Path, fmt.Sprintf("entries %s: %s", how, strings.Join(es, " "))
		}
	case wire.OpMountAdd:
		if r, ok := decoded[wire.MountEntry](req); ok {
			return r.Prefix, fmt.Sprintf("mounted from share %s, path /%s", r.Share, r.SharePath)
		}
	case wire.OpMountRemove:
		if r, ok := decoded[wire.PathReq](req); ok {
			return r.Path, "mount removed"
		}
	case wire.OpUserAdd:
		if r, ok := decoded[wire.UserAddReq](req); ok {
			kind := "user"
			if r.Gateway {
				kind = "gateway"
			}
			groups := "no groups"
			if len(r.Groups) > 0 {
				groups = "groups " + strings.Join(r.Groups, ",")
			}
			return "", fmt.Sprintf("%s %s added, %s", kind, r.Name, groups)
		}
	case wire.OpUserRevoke:
		if r, ok := decoded[wire.UserRevokeReq](req); ok {
			return "", "user " + r.Name + " revoked"
		}
	case wire.OpUserPasswd:
		if r, ok := decoded[wire.UserPasswdReq](req); ok {
			if r.Name == "" {
				return "", "own password set"
			}
			return "", "password of " + r.Name + " set"
		}
	case wire.OpShareRegister:
		if r, ok := decoded[wire.ShareRegisterReq](req); ok {
			return "", fmt.Sprintf("share %s registered at %s", r.Name, strings.Join(r.Addrs, ","))
		}
	case wire.OpTokenCreate:
		if r, ok := decoded[wire.TokenCreateReq](req); ok && len(r.Scopes) > 0 {
			return "", fmt.Sprintf("bearer token (JWT) created, scopes %s, audience %q", strings.Join(r.Scopes, " "), r.Audience)
		}
		return "", "sign-in token created"
	case wire.OpDomainLink: // never the invitation's code: it is a secret
		if r, ok := decoded[wire.DomainLinkReq](req); ok {
			if r.Code != "" {
				return r.Link.Prefix, "link made by an invitation"
			}
			return r.Link.Prefix, "domain " + r.Link.Name + " linked, " + admits(r.Link.Admit, r.Link.Groups)
		}
	case wire.OpDomainAssert:
		if r, ok := decoded[wire.DomainAssertReq](req); ok {
			return "", "group assertion signed for domain " + r.Domain
		}
	case wire.OpIssuerTrust:
		if r, ok := decoded[wire.IssuerInfo](req); ok {
			return r.Base, fmt.Sprintf("issuer %s trusted as %s, audience %s", r.Issuer, r.Name, r.Audience)
		}
	case wire.OpIssuerDistrust:
		if r, ok := decoded[wire.IssuerDistrustReq](req); ok {
			return "", "issuer " + r.Name + " distrusted"
		}
	case wire.OpDomainUnlink:
		if r, ok := decoded[wire.DomainNameReq](req); ok {
			return "", "link to domain " + r.Name + " ended"
		}
	case wire.OpDomainInvite:
		if r, ok := decoded[wire.DomainInviteReq](req); ok {
			return r.Prefix, "invitation made for domain " + r.Name + ", " + admits(r.Admit, r.Groups)
		}
	case wire.OpDomainJoin:
		if r, ok := decoded[wire.DomainJoinReq](req); ok {
			return "", "invitation redeemed by domain " + r.Hello.Domain
		}
	}
	return "", ""
}

// admits says what a link admits.
func admits(admit string, groups []string) string {
	if admit == wire.AdmitGroups {
		return "admitting groups " + strings.Join(groups, ",")
	}
	if admit == "" {
		admit = wire.AdmitAll
	}
	return "admitting " + admit
}

// decoded is req's meta decoded as a T, if it is one.
func decoded[T any](req *rpc.Request) (T, bool) {
	var v T
	return v, req.Decode(&v) == nil
}

// connRefused records a connection refused by Opened.
func (c *Controller) connRefused(sc *rpc.ServerConn, err error) {
	we, ok := refusal(err)
	if !ok {
		return
	}
	who := ""
	if id, _, err := auth.PeerIdentity(sc.TLSState()); err == nil {
		who = id.String()
	}
	c.audit.Write(audit.Record{Who: who, Action: audit.ActionConnect, Result: audit.Refused,
		From: sc.From(), Detail: we.Message})
}
