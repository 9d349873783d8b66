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
// it makes (the ops in changes). Links to other domains are recorded by
// their handlers with Audit.

// Audit is the controller's audit log, for records of its own kind (link
// changes: audit.Record{Action: audit.ActionDomainLink, ...}); Server,
// Domain and Time are filled in.
func (c *Controller) Audit() *audit.Log { return c.audit }

// changes are the ops whose success the log records.
var changes = map[wire.Op]bool{
	wire.OpUserAdd: true, wire.OpUserRevoke: true, wire.OpUserPasswd: true, wire.OpACLSet: true,
	wire.OpMountAdd: true, wire.OpMountRemove: true, wire.OpShareRegister: true, wire.OpTokenCreate: true,
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
		var r wire.ResolveReq
		if req.Decode(&r) == nil {
			return r.Path, ""
		}
	case wire.OpACLGet:
		var r wire.ACLGetReq
		if req.Decode(&r) == nil {
			return r.Path, ""
		}
	case wire.OpACLSet:
		var r wire.ACLSetReq
		if req.Decode(&r) == nil {
			es := make([]string, 0, len(r.Entries))
			for _, e := range r.Entries {
				s := e.Who + ":" + e.Rights
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
		var r wire.MountEntry
		if req.Decode(&r) == nil {
			return r.Prefix, fmt.Sprintf("mounted from share %s, path /%s", r.Share, r.SharePath)
		}
	case wire.OpMountRemove:
		var r wire.PathReq
		if req.Decode(&r) == nil {
			return r.Path, "mount removed"
		}
	case wire.OpUserAdd:
		var r wire.UserAddReq
		if req.Decode(&r) == nil {
			kind := "user"
			if r.Gateway {
				kind = "gateway"
			}
			return "", fmt.Sprintf("%s %s added, groups [%s]", kind, r.Name, strings.Join(r.Groups, " "))
		}
	case wire.OpUserRevoke:
		var r wire.UserRevokeReq
		if req.Decode(&r) == nil {
			return "", "user " + r.Name + " revoked"
		}
	case wire.OpUserPasswd:
		var r wire.UserPasswdReq
		if req.Decode(&r) == nil {
			if r.Name == "" {
				return "", "own password set"
			}
			return "", "password of " + r.Name + " set"
		}
	case wire.OpShareRegister:
		var r wire.ShareRegisterReq
		if req.Decode(&r) == nil {
			return "", fmt.Sprintf("share %s registered at %s", r.Name, strings.Join(r.Addrs, ","))
		}
	case wire.OpTokenCreate:
		return "", "sign-in token created"
	}
	return "", ""
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
