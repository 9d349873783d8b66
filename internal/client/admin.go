package client

import (
	"context"
	"time"

	"pando.dev/pando/internal/wire"
)

// Admin is a Client's administrative side: the typed controller calls
// that manage the domain (mounts, shares, users, ACLs, credentials) and
// those a gateway makes to check its users' credentials. Requests for
// files (the data path) stay on Client. An Admin shares its Client's
// connection to the controller, and a change to the mount table or the
// ACLs drops the Client's mount table and tokens, so that its next request
// sees the change: that is why it lives beside Client, not in a package
// of its own.
type Admin struct{ c *Client }

// Admin returns the client's administrative calls.
func (c *Client) Admin() Admin { return Admin{c: c} }

// WhoAmI asks the controller who this client is.
func (a Admin) WhoAmI(ctx context.Context) (wire.WhoAmIResp, error) {
	var r wire.WhoAmIResp
	err := a.c.ControllerCall(ctx, wire.OpWhoAmI, wire.Empty{}, &r)
	return r, err
}

// MountAdd mounts share:sharePath at the global prefix, with more
// locations of the same files, if any (replicas: recorded and listed;
// requests still go to share).
func (a Admin) MountAdd(ctx context.Context, prefix, share, sharePath string, more ...wire.Location) error {
	g, err := Clean(prefix)
	if err != nil {
		return err
	}
	defer a.c.forgetMounts()
	return a.c.ControllerCall(ctx, wire.OpMountAdd, wire.MountEntry{Prefix: g, Share: share, SharePath: sharePath, More: more}, nil)
}

// MountRemove removes the mount at prefix.
func (a Admin) MountRemove(ctx context.Context, prefix string) error {
	g, err := Clean(prefix)
	if err != nil {
		return err
	}
	defer a.c.forgetMounts()
	return a.c.ControllerCall(ctx, wire.OpMountRemove, wire.PathReq{Path: g}, nil)
}

// ShareList lists the registered shares.
func (a Admin) ShareList(ctx context.Context) ([]wire.ShareInfo, error) {
	var r wire.ShareListResp
	err := a.c.ControllerCall(ctx, wire.OpShareList, wire.Empty{}, &r)
	return r.Shares, err
}

// UserAdd creates a user and returns their credentials.
func (a Admin) UserAdd(ctx context.Context, name string, groups []string) (wire.UserAddResp, error) {
	var r wire.UserAddResp
	err := a.c.ControllerCall(ctx, wire.OpUserAdd, wire.UserAddReq{Name: name, Groups: groups}, &r)
	return r, err
}

// GatewayAdd creates a gateway (credentials of the gateway role, which
// act only in the names of the users the gateway serves).
func (a Admin) GatewayAdd(ctx context.Context, name string) (wire.UserAddResp, error) {
	var r wire.UserAddResp
	err := a.c.ControllerCall(ctx, wire.OpUserAdd, wire.UserAddReq{Name: name, Gateway: true}, &r)
	return r, err
}

// UserList lists users.
func (a Admin) UserList(ctx context.Context) ([]wire.UserInfo, error) {
	var r wire.UserListResp
	err := a.c.ControllerCall(ctx, wire.OpUserList, wire.Empty{}, &r)
	return r.Users, err
}

// UserRevoke revokes a user's certificates and tokens.
func (a Admin) UserRevoke(ctx context.Context, name string) error {
	return a.c.ControllerCall(ctx, wire.OpUserRevoke, wire.UserRevokeReq{Name: name}, nil)
}

// ACLGet returns the ACL on a prefix.
func (a Admin) ACLGet(ctx context.Context, prefix string) (wire.ACLResp, error) {
	var r wire.ACLResp
	g, err := Clean(prefix)
	if err != nil {
		return r, err
	}
	err = a.c.ControllerCall(ctx, wire.OpACLGet, wire.ACLGetReq{Path: g, For: a.c.opts.ActFor}, &r)
	return r, err
}

// ACLSet changes entries of the ACL on a prefix.
func (a Admin) ACLSet(ctx context.Context, prefix string, entries []wire.ACLEntry, replace bool) error {
	g, err := Clean(prefix)
	if err != nil {
		return err
	}
	defer a.c.forgetMounts()
	return a.c.ControllerCall(ctx, wire.OpACLSet, wire.ACLSetReq{Path: g, Entries: entries, Replace: replace}, nil)
}

// Status returns the domain's health as the controller sees it
// (administrators only).
func (a Admin) Status(ctx context.Context) (wire.StatusResp, error) {
	var r wire.StatusResp
	err := a.c.ControllerCall(ctx, wire.OpStatus, wire.Empty{}, &r)
	return r, err
}

// TokenCreate asks the controller for a sign-in token of this client's
// user, for gateways, valid for ttl (0: the controller's default).
func (a Admin) TokenCreate(ctx context.Context, ttl time.Duration) (wire.TokenCreateResp, error) {
	var r wire.TokenCreateResp
	err := a.c.ControllerCall(ctx, wire.OpTokenCreate, wire.TokenCreateReq{TTL: int64(ttl)}, &r)
	return r, err
}

// JWTCreate asks the controller for a JWT of the WLCG profile for this
// client's user, with scopes (storage.read:/uva/data ...), for audience
// ("": the domain's own), valid for ttl (0: the controller's default).
func (a Admin) JWTCreate(ctx context.Context, scopes []string, audience string, ttl time.Duration) (wire.TokenCreateResp, error) {
	var r wire.TokenCreateResp
	err := a.c.ControllerCall(ctx, wire.OpTokenCreate, wire.TokenCreateReq{TTL: int64(ttl), Scopes: scopes, Audience: audience}, &r)
	return r, err
}

// BearerCheck asks the controller, for a gateway, whose JWT tok is.
func (a Admin) BearerCheck(ctx context.Context, tok string) (wire.BearerCheckResp, error) {
	var r wire.BearerCheckResp
	err := a.c.ControllerCall(ctx, wire.OpBearerCheck, wire.BearerCheckReq{Token: tok}, &r)
	return r, err
}

// IssuerTrust makes the domain trust an issuer of JWTs.
func (a Admin) IssuerTrust(ctx context.Context, iss wire.IssuerInfo) error {
	return a.c.ControllerCall(ctx, wire.OpIssuerTrust, iss, nil)
}

// IssuerList lists the issuers the domain trusts.
func (a Admin) IssuerList(ctx context.Context) ([]wire.IssuerInfo, error) {
	var r wire.IssuerListResp
	err := a.c.ControllerCall(ctx, wire.OpIssuerList, wire.Empty{}, &r)
	return r.Issuers, err
}

// IssuerDistrust ends the trust in an issuer (by name or iss).
func (a Admin) IssuerDistrust(ctx context.Context, name string) error {
	return a.c.ControllerCall(ctx, wire.OpIssuerDistrust, wire.IssuerDistrustReq{Name: name}, nil)
}

// DomainJWKS is the domain's own issuer, audience and key set.
func (a Admin) DomainJWKS(ctx context.Context) (wire.DomainJWKSResp, error) {
	var r wire.DomainJWKSResp
	err := a.c.ControllerCall(ctx, wire.OpDomainJWKS, wire.Empty{}, &r)
	return r, err
}

// TokenCheck asks the controller, for a gateway, whose sign-in token tok is.
func (a Admin) TokenCheck(ctx context.Context, tok []byte) (wire.TokenCheckResp, error) {
	var r wire.TokenCheckResp
	err := a.c.ControllerCall(ctx, wire.OpTokenCheck, wire.TokenCheckReq{Token: tok}, &r)
	return r, err
}

// UserPasswd sets the gateway password of user name ("": this client's).
func (a Admin) UserPasswd(ctx context.Context, name, password string) error {
	return a.c.ControllerCall(ctx, wire.OpUserPasswd, wire.UserPasswdReq{Name: name, Password: password}, nil)
}

// PasswordCheck asks the controller, for a gateway, whether password is
// user name's.
func (a Admin) PasswordCheck(ctx context.Context, name, password string) error {
	return a.c.ControllerCall(ctx, wire.OpPasswordCheck, wire.UserPasswdReq{Name: name, Password: password}, nil)
}

// S3KeyCreate makes an S3 access key for user name ("": this client's).
func (a Admin) S3KeyCreate(ctx context.Context, name string) (wire.S3KeyResp, error) {
	var r wire.S3KeyResp
	err := a.c.ControllerCall(ctx, wire.OpS3KeyCreate, wire.S3KeyReq{Name: name}, &r)
	return r, err
}

// S3KeyGet asks the controller, for a gateway, whose access key access is
// and its secret.
func (a Admin) S3KeyGet(ctx context.Context, access string) (wire.S3KeyResp, error) {
	var r wire.S3KeyResp
	err := a.c.ControllerCall(ctx, wire.OpS3KeyGet, wire.S3KeyReq{Access: access}, &r)
	return r, err
}
