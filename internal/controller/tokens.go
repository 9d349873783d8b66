package controller

import (
	"context"
	"errors"
	"strings"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/store"
	"pando.dev/pando/internal/wire"
)

// Sign-in tokens (pando token create): a person proves who they are to a
// gateway with a token the controller signed, instead of a certificate
// or a password. The token names the user and when it ends, and grants
// nothing at a share (auth.Token.SignIn; shares refuse it). A gateway
// asks the controller whose a token is (token-check); the controller
// answers only while the user is known and not revoked, and only for
// tokens issued since the user was (re-)added, so that revoking a user
// voids their sign-in tokens too.

// Lifetimes of sign-in tokens.
const (
	signInDefault = 8 * time.Hour
	signInMax     = 30 * 24 * time.Hour
)

// tokenCreate signs a sign-in token for the calling user.
func (c *Controller) tokenCreate(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.TokenCreateReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if len(r.Scopes) > 0 {
		return c.jwtCreate(ctx, p, &r)
	}
	if r.Audience != "" {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "an audience is for scoped tokens; give --scope too")
	}
	ttl := time.Duration(r.TTL)
	switch {
	case ttl == 0:
		ttl = signInDefault
	case ttl < time.Second || ttl > signInMax:
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "a sign-in token lives from 1s to %s; ask for a --ttl in between", signInMax)
	}
	if _, err := c.subject(ctx, p); err != nil {
		return rpc.Reply{}, err
	}
	now := time.Now()
	t := &auth.Token{ID: newID(), Principal: p.id.String(), Issued: now, Expires: now.Add(ttl), SignIn: true}
	signed, err := auth.SignToken(c.keys.tokenKey, t)
	if err != nil {
		return rpc.Reply{}, err
	}
	return rpc.Reply{Msg: wire.TokenCreateResp{Token: signed, Expires: t.Expires.UnixNano()}}, nil
}

// tokenCheck tells a gateway whose sign-in token it was given.
func (c *Controller) tokenCheck(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.TokenCheckReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if err := onlyGateway(p, "check sign-in tokens"); err != nil {
		return rpc.Reply{}, err
	}
	t, err := auth.VerifyToken(c.keys.tokenPub, r.Token, time.Now())
	if err != nil {
		code := wire.CodeTokenInvalid
		if errors.Is(err, auth.ErrTokenExpired) {
			code = wire.CodeTokenExpired
		}
		return rpc.Reply{}, &wire.Error{Code: code, Message: "the sign-in token was refused: " + err.Error()}
	}
	name, domain, _ := strings.Cut(t.Principal, "@")
	if !t.SignIn || auth.ValidName(name) != nil || domain != c.keys.domain {
		return rpc.Reply{}, wire.Errorf(wire.CodeTokenInvalid, "the token is no sign-in token of a user of domain %s", c.keys.domain)
	}
	u, err := c.liveUser(ctx, name)
	if err != nil {
		return rpc.Reply{}, err
	}
	if t.Issued.UnixNano() < u.validFrom() {
		return rpc.Reply{}, wire.Errorf(wire.CodeTokenRevoked, "the credentials of %s have been revoked", t.Principal)
	}
	return rpc.Reply{Msg: wire.TokenCheckResp{User: name, Expires: t.Expires.UnixNano()}}, nil
}

// liveUser reads the record of user name, who must be known, not a
// gateway, and not revoked.
func (c *Controller) liveUser(ctx context.Context, name string) (*userRec, error) {
	v, err := c.st.Get(ctx, pfxUser+name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	return c.liveRecord(name, v)
}

// liveRecord is liveUser with the user's record v (nil: none) read.
func (c *Controller) liveRecord(name string, v []byte) (*userRec, error) {
	var u userRec
	if v == nil || wire.Unmarshal(v, &u) != nil || u.Gateway {
		return nil, wire.Errorf(wire.CodeNotRegistered, "user %s@%s is not known to the controller", name, c.keys.domain)
	}
	if u.Revoked != 0 {
		return nil, wire.Errorf(wire.CodeTokenRevoked, "the credentials of %s@%s have been revoked", name, c.keys.domain)
	}
	return &u, nil
}

// onlyGateway refuses callers that are no gateway.
func onlyGateway(p *peer, what string) error {
	if p.id.Role != auth.RoleGateway {
		return wire.Errorf(wire.CodeAccess, "%s is not a gateway: only gateways %s", p.id, what)
	}
	return nil
}
