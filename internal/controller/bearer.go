package controller

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/store"
	"pando.dev/pando/internal/wire"
)

// Bearer tokens (JWTs of the WLCG profile) beside certificates. The
// domain is an issuer of its own (iss and audience pando://DOMAIN, keys
// published by pando domain jwks): pando token create --scope signs one
// for the calling user. It also trusts the issuers an administrator names
// (pando domain trust-issuer), each with its key set, the audience its
// tokens must carry and the global path its scopes are relative to.
//
// A gateway given a JWT asks whose it is (bearer-check) and then asks
// for share tokens with it (ResolveReq.Bearer): the controller verifies
// the JWT again each time, so a gateway cannot widen it, and signs
// share tokens whose rights are what the scopes cover, intersected, for
// a token of the domain's own, with the user's ACL rights; a trusted
// issuer's token is a capability: its scopes below the issuer's base,
// for principal SUB@NAME, and nothing else.

// Lifetimes of the domain's own JWTs.
const (
	jwtDefault = time.Hour
	jwtMax     = 7 * 24 * time.Hour
)

// jwtIssuer is the domain's iss and the audience its own tokens carry
// unless another is asked for.
func (k *keys) jwtIssuer() string { return "pando://" + k.domain }

// issuerRec is a trusted issuer (store key pfxIssuer + name).
type issuerRec = wire.IssuerInfo

// bearer is a verified JWT.
type bearer struct {
	principal string
	user      string // the home user of a token of the domain's own
	scopes    []auth.Scope
	expires   time.Time
}

// refuseBearer turns a refusal of a JWT into a wire error of its kind.
func refuseBearer(err error) error {
	code := wire.CodeTokenInvalid
	if errors.Is(err, auth.ErrJWTExpired) {
		code = wire.CodeTokenExpired
	}
	msg := err.Error()
	if inner := errors.Unwrap(err); inner != nil {
		msg = strings.TrimPrefix(msg, inner.Error()+": ")
	}
	return &wire.Error{Code: code, Message: "the bearer token was refused: " + msg}
}

// verifyBearer checks a JWT: its issuer trusted (or the domain's own),
// its key and signature, lifetime and audience, and its subject (for the
// domain's own tokens: a live user, the token issued since they were
// added); scopes of a trusted issuer are made global below its base.
func (c *Controller) verifyBearer(ctx context.Context, raw string) (*bearer, error) {
	j, err := auth.ParseJWT(raw)
	if err != nil {
		return nil, refuseBearer(err)
	}
	now := time.Now()
	if j.Claims.Issuer == c.keys.jwtIssuer() {
		ks, err := ownKeySet(c.keys)
		if err != nil {
			return nil, err
		}
		if err := j.Verify(ks, now); err != nil {
			return nil, refuseBearer(err)
		}
		if err := j.CheckAudience(c.keys.jwtIssuer()); err != nil {
			return nil, refuseBearer(err)
		}
		name := j.Claims.Subject
		if auth.ValidName(name) != nil || j.Claims.IssuedAt == nil {
			return nil, wire.Errorf(wire.CodeTokenInvalid, "the bearer token names no user of domain %s", c.keys.domain)
		}
		u, err := c.liveUser(ctx, name)
		if err != nil {
			return nil, err
		}
		if j.Claims.IssuedAt.Time().Before(jwtValidFrom(u)) {
			return nil, wire.Errorf(wire.CodeTokenRevoked, "the credentials of %s@%s have been revoked", name, c.keys.domain)
		}
		return &bearer{principal: name + "@" + c.keys.domain, user: name, scopes: j.Scopes, expires: j.Claims.Expiry.Time()}, nil
	}
	iss, err := c.issuerOf(ctx, j.Claims.Issuer)
	if err != nil {
		return nil, err
	}
	ks, err := auth.ParseJWKS(iss.JWKS)
	if err != nil {
		return nil, fmt.Errorf("the key set of issuer %s: %w", iss.Name, err)
	}
	if err := j.Verify(ks, now); err != nil {
		return nil, refuseBearer(err)
	}
	if err := j.CheckAudience(iss.Audience); err != nil {
		return nil, refuseBearer(err)
	}
	if !validSubject(j.Claims.Subject) {
		return nil, wire.Errorf(wire.CodeTokenInvalid, "the bearer token's subject %.80q is not a name pando takes (letters, digits and . _ : / + = -, at most 128)", j.Claims.Subject)
	}
	scopes := make([]auth.Scope, len(j.Scopes))
	for i, s := range j.Scopes {
		scopes[i] = auth.Scope{Action: s.Action, Path: path.Join(iss.Base, s.Path)}
	}
	return &bearer{principal: j.Claims.Subject + "@" + iss.Name, scopes: scopes, expires: j.Claims.Expiry.Time()}, nil
}

// jwtValidFrom is the first iat (whole seconds) of a JWT of u's present
// life: a user added again after a revocation within the second of an
// older token's iat does not revive it.
func jwtValidFrom(u *userRec) time.Time {
	vf := time.Unix(0, u.validFrom())
	if s := vf.Truncate(time.Second); u.Since != 0 && !s.Equal(vf) {
		return s.Add(time.Second)
	}
	return vf.Truncate(time.Second)
}

// validSubject bounds the subjects of other issuers' tokens, which name
// principals (and owners of files).
func validSubject(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:/+=-", r)) {
			return false
		}
	}
	return true
}

// issuerOf finds the trusted issuer whose iss is iss.
func (c *Controller) issuerOf(ctx context.Context, iss string) (*issuerRec, error) {
	kvs, err := c.st.List(ctx, pfxIssuer)
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs {
		var r issuerRec
		if wire.Unmarshal(kv.Value, &r) == nil && r.Issuer == iss {
			return &r, nil
		}
	}
	return nil, wire.Errorf(wire.CodeTokenInvalid, "the bearer token was refused: its issuer %.200q is not trusted by domain %s (see pando domain issuers)", iss, c.keys.domain)
}

// ownKeySet is the key set of the domain's own JWTs.
func ownKeySet(k *keys) (*jose.JSONWebKeySet, error) {
	kid, err := auth.JWTKeyID(&k.jwtKey.PublicKey)
	if err != nil {
		return nil, err
	}
	return &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &k.jwtKey.PublicKey, KeyID: kid}}}, nil
}

// resolveBearer verifies the JWT of a resolve request, if it carries
// one: only a gateway presents one, in no user's name but the JWT's.
func (c *Controller) resolveBearer(ctx context.Context, p *peer, r *wire.ResolveReq) (*bearer, error) {
	if r.Bearer == "" {
		return nil, nil
	}
	if err := onlyGateway(p, "present bearer tokens"); err != nil {
		return nil, err
	}
	if p.id.Domain != c.keys.domain {
		return nil, wire.Errorf(wire.CodeAccess, "%s is a gateway of another domain; bearer tokens are presented to this domain by its own gateways", p.id)
	}
	if r.For != "" || r.Proxy != "" {
		return nil, wire.Errorf(wire.CodeInvalid, "a bearer token names its own principal; ask without For or Proxy")
	}
	b, err := c.verifyBearer(ctx, r.Bearer)
	if err != nil {
		return nil, err
	}
	r.For = b.user
	return b, nil
}

// rights is what a share token made from the JWT grants at a global
// path: what its scopes cover there and, for a token of the domain's
// own, what the user's ACLs grant too.
func (b *bearer) rights(acls map[string]auth.ACL, subj auth.Subject) func(string) auth.Rights {
	return func(q string) auth.Rights {
		r := auth.ScopeRights(b.scopes, q)
		if b.user != "" {
			r &= auth.Effective(acls, subj, q)
		}
		return r
	}
}

// bearerCheck tells a gateway whose JWT it was given.
func (c *Controller) bearerCheck(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.BearerCheckReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if err := onlyGateway(p, "check bearer tokens"); err != nil {
		return rpc.Reply{}, err
	}
	b, err := c.verifyBearer(ctx, r.Token)
	if err != nil {
		return rpc.Reply{}, err
	}
	resp := wire.BearerCheckResp{Principal: b.principal, User: b.user, Expires: b.expires.UnixNano()}
	for _, s := range b.scopes {
		resp.Scopes = append(resp.Scopes, s.String())
	}
	return rpc.Reply{Msg: resp}, nil
}

// jwtCreate signs a JWT of the domain's own for the calling user.
func (c *Controller) jwtCreate(ctx context.Context, p *peer, r *wire.TokenCreateReq) (rpc.Reply, error) {
	ttl := time.Duration(r.TTL)
	switch {
	case ttl == 0:
		ttl = jwtDefault
	case ttl < time.Second || ttl > jwtMax:
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "a scoped token lives from 1s to %s; ask for a --ttl in between", jwtMax)
	}
	if len(r.Scopes) > auth.MaxScopes {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "a token holds at most %d scopes", auth.MaxScopes)
	}
	var scopes []auth.Scope
	for _, s := range r.Scopes {
		sc, err := auth.ParseScope(s)
		if err != nil {
			return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "%v", err)
		}
		scopes = append(scopes, sc)
	}
	aud := r.Audience
	if aud == "" {
		aud = c.keys.jwtIssuer()
	}
	if len(aud) > 512 {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "the audience is longer than 512 bytes")
	}
	if _, err := c.subject(ctx, p); err != nil {
		return rpc.Reply{}, err
	}
	u, err := c.liveUser(ctx, p.id.Name)
	if err != nil {
		return rpc.Reply{}, err
	}
	now := time.Now()
	exp := now.Add(ttl)
	iat := max(now.Unix(), jwtValidFrom(u).Unix()) // in the user's present life, though iat counts whole seconds
	s, err := auth.SignJWT(c.keys.jwtKey, &auth.JWTClaims{
		Issuer: c.keys.jwtIssuer(), Subject: p.id.Name, Audience: jwt.Audience{aud},
		Expiry: jwt.NewNumericDate(exp), IssuedAt: jwt.NewNumericDate(time.Unix(iat, 0)), NotBefore: jwt.NewNumericDate(now),
		ID: newID(), Scope: auth.ScopeClaim(scopes), Version: auth.JWTVersion,
	})
	if err != nil {
		return rpc.Reply{}, err
	}
	return rpc.Reply{Msg: wire.TokenCreateResp{JWT: s, Expires: exp.UnixNano()}}, nil
}

// issuerTrust stores a trusted issuer (replacing one of the same name).
func (c *Controller) issuerTrust(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.IssuerInfo
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if _, err := c.require(ctx, p, "/", auth.Admin); err != nil {
		return rpc.Reply{}, err
	}
	if err := auth.ValidName(r.Name); err != nil {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "issuer name: %v", err)
	}
	if u, err := url.Parse(r.Issuer); err != nil || u.Scheme == "" || u.Host == "" || len(r.Issuer) > 512 {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "the issuer %q is no URL like https://issuer.example.org (the tokens' iss)", r.Issuer)
	}
	// Principals SUB@NAME must not pass for another domain's: a name is
	// the home domain's, or a linked domain's only for that domain's own
	// issuer (pando://NAME, whose alice@NAME is the same person).
	if r.Name == c.keys.domain {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "%s is this domain's own name; name the issuer with another (--name)", r.Name)
	}
	if _, err := c.st.Get(ctx, pfxLink+r.Name); err == nil && r.Issuer != "pando://"+r.Name {
		return rpc.Reply{}, wire.Errorf(wire.CodeExist, "%s is the name of a linked domain, whose principals are %s's own; name the issuer with another (--name)", r.Name, r.Name)
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return rpc.Reply{}, err
	}
	if r.Issuer == c.keys.jwtIssuer() {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "%s is this domain's own issuer, trusted already", r.Issuer)
	}
	if r.Audience == "" || len(r.Audience) > 512 {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "give the audience the issuer's tokens must carry for this domain (--audience)")
	}
	base, err := c.cleanGlobal(r.Base, true)
	if err != nil {
		return rpc.Reply{}, err
	}
	if _, err := auth.ParseJWKS(r.JWKS); err != nil {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "the issuer's key set: %v", err)
	}
	kvs, err := c.st.List(ctx, pfxIssuer)
	if err != nil {
		return rpc.Reply{}, err
	}
	for _, kv := range kvs {
		var o issuerRec
		if wire.Unmarshal(kv.Value, &o) == nil && o.Issuer == r.Issuer && o.Name != r.Name {
			return rpc.Reply{}, wire.Errorf(wire.CodeExist, "issuer %s is trusted already under the name %s; distrust it first", r.Issuer, o.Name)
		}
	}
	r.Base, r.Added = base, time.Now().UnixNano()
	if err := put(ctx, c.st, pfxIssuer+r.Name, r); err != nil {
		return rpc.Reply{}, err
	}
	c.log.Info("issuer trusted", "name", r.Name, "issuer", r.Issuer, "audience", r.Audience, "base", r.Base, "by", p.id.String())
	return rpc.Reply{Msg: wire.Empty{}}, nil
}

// issuerList lists the trusted issuers.
func (c *Controller) issuerList(ctx context.Context, p *peer) (rpc.Reply, error) {
	if _, err := c.require(ctx, p, "/", auth.Admin); err != nil {
		return rpc.Reply{}, err
	}
	kvs, err := c.st.List(ctx, pfxIssuer)
	if err != nil {
		return rpc.Reply{}, err
	}
	resp := wire.IssuerListResp{Issuers: []wire.IssuerInfo{}}
	for _, kv := range kvs {
		var r issuerRec
		if err := wire.Unmarshal(kv.Value, &r); err != nil {
			return rpc.Reply{}, fmt.Errorf("issuer record %s is damaged: %w", kv.Key, err)
		}
		resp.Issuers = append(resp.Issuers, r)
	}
	slices.SortFunc(resp.Issuers, func(a, b wire.IssuerInfo) int { return strings.Compare(a.Name, b.Name) })
	return rpc.Reply{Msg: resp}, nil
}

// issuerDistrust ends the trust in an issuer, named by name or iss: its
// tokens are refused from the next request on.
func (c *Controller) issuerDistrust(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.IssuerDistrustReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if _, err := c.require(ctx, p, "/", auth.Admin); err != nil {
		return rpc.Reply{}, err
	}
	name := r.Name
	if auth.ValidName(name) != nil {
		iss, err := c.issuerOf(ctx, r.Name)
		if err != nil {
			return rpc.Reply{}, wire.Errorf(wire.CodeNotExist, "no issuer %q is trusted (see pando domain issuers)", r.Name)
		}
		name = iss.Name
	}
	if _, err := c.st.Get(ctx, pfxIssuer+name); errors.Is(err, store.ErrNotFound) {
		return rpc.Reply{}, wire.Errorf(wire.CodeNotExist, "no issuer %q is trusted (see pando domain issuers)", r.Name)
	} else if err != nil {
		return rpc.Reply{}, err
	}
	if err := c.st.Delete(ctx, pfxIssuer+name); err != nil {
		return rpc.Reply{}, err
	}
	c.log.Info("issuer distrusted", "name", name, "by", p.id.String())
	return rpc.Reply{Msg: wire.Empty{}}, nil
}

// domainJWKS publishes the domain's own issuer and key set.
func (c *Controller) domainJWKS() (rpc.Reply, error) {
	b, err := auth.JWKSOf(c.keys.jwtKey)
	if err != nil {
		return rpc.Reply{}, err
	}
	return rpc.Reply{Msg: wire.DomainJWKSResp{Issuer: c.keys.jwtIssuer(), Audience: c.keys.jwtIssuer(), JWKS: b}}, nil
}
