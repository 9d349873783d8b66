package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/store"
	"pando.dev/pando/internal/wire"
)

// The domain's users: adding one (or a gateway), listing, revoking.

func (c *Controller) userAdd(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.UserAddReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if _, err := c.require(ctx, p, "/", auth.Admin); err != nil {
		return rpc.Reply{}, err
	}
	if r.Gateway && len(r.Groups) > 0 {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "a gateway has no rights of its own and belongs to no group; leave out --group")
	}
	resp, err := c.issueUser(ctx, r.Name, r.Groups, false, r.Gateway)
	if err != nil {
		return rpc.Reply{}, err
	}
	return rpc.Reply{Msg: resp}, nil
}

// issueUser creates (or re-creates a revoked) user with a fresh key pair.
// With again set, an existing live user gets an additional certificate.
func (c *Controller) issueUser(ctx context.Context, name string, groups []string, again, gateway bool) (wire.UserAddResp, error) {
	if err := auth.ValidName(name); err != nil {
		return wire.UserAddResp{}, wire.Errorf(wire.CodeInvalid, "user name: %v", err)
	}
	for _, g := range groups {
		if err := auth.ValidName(g); err != nil {
			return wire.UserAddResp{}, wire.Errorf(wire.CodeInvalid, "group name: %v", err)
		}
	}
	// A compare-and-swap on the user's record: two controllers adding
	// one user at once make one user, and the other is told it exists.
	for attempt := 0; ; attempt++ {
		old, err := c.st.Get(ctx, pfxUser+name)
		var rec userRec
		switch {
		case errors.Is(err, store.ErrNotFound):
			old, rec = nil, userRec{Name: name, Groups: groups, Created: time.Now().UnixNano(), Gateway: gateway}
		case err != nil:
			return wire.UserAddResp{}, err
		default:
			if err := wire.Unmarshal(old, &rec); err != nil {
				return wire.UserAddResp{}, fmt.Errorf("state record %s is damaged: %w", pfxUser+name, err)
			}
			switch {
			case rec.Revoked != 0:
				rec.Revoked = 0
				rec.Groups = groups
				rec.Gateway = gateway
				rec.Since, rec.Password = time.Now().UnixNano(), "" // nothing from before the revocation holds
			case !again:
				return wire.UserAddResp{}, wire.Errorf(wire.CodeExist, "user %s already exists", name)
			}
		}
		key, keyPEM, err := auth.NewKey()
		if err != nil {
			return wire.UserAddResp{}, err
		}
		id := auth.Identity{Domain: c.keys.domain, Role: auth.RoleUser, Name: name}
		if rec.Gateway {
			id.Role = auth.RoleGateway
		}
		cert, serial, err := c.keys.ca.Issue(id, key.Public(), c.cfg.CertTTL, nil)
		if err != nil {
			return wire.UserAddResp{}, err
		}
		rec.Serials = append(rec.Serials, serial)
		val, err := wire.Marshal(rec)
		if err != nil {
			return wire.UserAddResp{}, err
		}
		err = c.st.CompareAndSwap(ctx, pfxUser+name, old, val)
		if errors.Is(err, store.ErrConflict) && attempt < 10 {
			continue
		}
		if err != nil {
			return wire.UserAddResp{}, err
		}
		return wire.UserAddResp{Cert: cert, Key: keyPEM, CA: c.keys.ca.CertPEM(), Controllers: c.Controllers(ctx)}, nil
	}
}

func (c *Controller) userList(ctx context.Context, p *peer) (rpc.Reply, error) {
	if _, err := c.require(ctx, p, "/", auth.Admin); err != nil {
		return rpc.Reply{}, err
	}
	kvs, err := c.st.List(ctx, pfxUser)
	if err != nil {
		return rpc.Reply{}, err
	}
	var out wire.UserListResp
	for _, kv := range kvs {
		var u userRec
		if err := wire.Unmarshal(kv.Value, &u); err != nil {
			return rpc.Reply{}, err
		}
		out.Users = append(out.Users, wire.UserInfo{Name: u.Name, Groups: u.Groups, Created: u.Created, Revoked: u.Revoked, Gateway: u.Gateway})
	}
	return rpc.Reply{Msg: out}, nil
}

func (c *Controller) userRevoke(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.UserRevokeReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if _, err := c.require(ctx, p, "/", auth.Admin); err != nil {
		return rpc.Reply{}, err
	}
	if r.Name == p.id.Name {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "you cannot revoke yourself; ask another administrator")
	}
	// The user's record by compare-and-swap (a certificate issued by
	// another controller meanwhile is revoked too), then the revocation,
	// which every controller passes on to its shares and acts on (see
	// followRevocations).
	var rev wire.Revocation
	for attempt := 0; ; attempt++ {
		old, err := c.st.Get(ctx, pfxUser+r.Name)
		if errors.Is(err, store.ErrNotFound) {
			return rpc.Reply{}, wire.Errorf(wire.CodeNotExist, "user %s does not exist (see `pando user ls`)", r.Name)
		} else if err != nil {
			return rpc.Reply{}, err
		}
		var rec userRec
		if err := wire.Unmarshal(old, &rec); err != nil {
			return rpc.Reply{}, fmt.Errorf("state record %s is damaged: %w", pfxUser+r.Name, err)
		}
		now := time.Now().UnixNano()
		rev = wire.Revocation{Principal: r.Name + "@" + c.keys.domain, Before: now, Serials: rec.Serials}
		rec.Revoked, rec.Serials = now, nil
		val, err := wire.Marshal(rec)
		if err != nil {
			return rpc.Reply{}, err
		}
		err = c.st.CompareAndSwap(ctx, pfxUser+r.Name, old, val)
		if errors.Is(err, store.ErrConflict) && attempt < 10 {
			continue
		}
		if err != nil {
			return rpc.Reply{}, err
		}
		break
	}
	if err := put(ctx, c.st, pfxRevoked+rev.Principal, rev); err != nil {
		return rpc.Reply{}, err
	}
	return rpc.Reply{}, nil
}

// certRenew issues the caller a new certificate of its identity for the
// key of its certificate request: a user or gateway of this domain, known
// and not revoked (the connection's certificate proves who it is).
func (c *Controller) certRenew(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.CertRenewReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if p.id.Domain != c.keys.domain || (p.id.Role != auth.RoleUser && p.id.Role != auth.RoleGateway) {
		return rpc.Reply{}, wire.Errorf(wire.CodeAccess, "%s may not renew a certificate here: only users and gateways of %s renew theirs", p.id, c.keys.domain)
	}
	for attempt := 0; ; attempt++ {
		old, err := c.st.Get(ctx, pfxUser+p.id.Name)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return rpc.Reply{}, err
		}
		var rec userRec
		if old == nil || wire.Unmarshal(old, &rec) != nil || rec.Gateway != (p.id.Role == auth.RoleGateway) {
			return rpc.Reply{}, wire.Errorf(wire.CodeNotRegistered, "%s is not known to the controller", p.id)
		}
		if rec.Revoked != 0 || !slices.Contains(rec.Serials, p.serial) {
			return rpc.Reply{}, wire.Errorf(wire.CodeTokenRevoked, "the credentials of %s have been revoked", p.id)
		}
		cert, serial, err := c.keys.ca.IssueCSR(p.id, r.CSR, c.cfg.CertTTL, nil)
		if err != nil {
			return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "the certificate request was refused: %v", err)
		}
		// Every certificate issued stays valid until it expires or the
		// user is revoked: clients of one user (an agent, a login, a
		// transfer) renew each their own.
		rec.Serials = append(rec.Serials, serial)
		val, err := wire.Marshal(rec)
		if err != nil {
			return rpc.Reply{}, err
		}
		err = c.st.CompareAndSwap(ctx, pfxUser+p.id.Name, old, val)
		if errors.Is(err, store.ErrConflict) && attempt < 10 {
			continue
		}
		if err != nil {
			return rpc.Reply{}, err
		}
		leaf, err := auth.ParseCertPEM(cert)
		if err != nil {
			return rpc.Reply{}, err
		}
		c.log.Info("certificate renewed", "principal", p.id.String(), "expires", leaf.NotAfter)
		return rpc.Reply{Msg: wire.CertRenewResp{Cert: cert, Expires: leaf.NotAfter.UnixNano()}}, nil
	}
}
