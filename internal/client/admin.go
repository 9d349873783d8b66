package client

import (
	"context"
	"time"

	"pando.dev/pando/internal/wire"
)

// Controller operations: thin, typed wrappers of ControllerCall.

// WhoAmI asks the controller who this client is.
func (c *Client) WhoAmI(ctx context.Context) (wire.WhoAmIResp, error) {
	var r wire.WhoAmIResp
	err := c.ControllerCall(ctx, wire.OpWhoAmI, wire.Empty{}, &r)
	return r, err
}

// MountAdd mounts share:sharePath at the global prefix, with more
// locations of the same files, if any (replicas: recorded and listed;
// requests still go to share).
func (c *Client) MountAdd(ctx context.Context, prefix, share, sharePath string, more ...wire.Location) error {
	g, err := Clean(prefix)
	if err != nil {
		return err
	}
	defer c.forgetMounts()
	return c.ControllerCall(ctx, wire.OpMountAdd, wire.MountEntry{Prefix: g, Share: share, SharePath: sharePath, More: more}, nil)
}

// MountRemove removes the mount at prefix.
func (c *Client) MountRemove(ctx context.Context, prefix string) error {
	g, err := Clean(prefix)
	if err != nil {
		return err
	}
	defer c.forgetMounts()
	return c.ControllerCall(ctx, wire.OpMountRemove, wire.PathReq{Path: g}, nil)
}

// ShareList lists the registered shares.
func (c *Client) ShareList(ctx context.Context) ([]wire.ShareInfo, error) {
	var r wire.ShareListResp
	err := c.ControllerCall(ctx, wire.OpShareList, wire.Empty{}, &r)
	return r.Shares, err
}

// UserAdd creates a user and returns their credentials.
func (c *Client) UserAdd(ctx context.Context, name string, groups []string) (wire.UserAddResp, error) {
	var r wire.UserAddResp
	err := c.ControllerCall(ctx, wire.OpUserAdd, wire.UserAddReq{Name: name, Groups: groups}, &r)
	return r, err
}

// GatewayAdd creates a gateway (credentials of the gateway role, which
// act only in the names of the users the gateway serves).
func (c *Client) GatewayAdd(ctx context.Context, name string) (wire.UserAddResp, error) {
	var r wire.UserAddResp
	err := c.ControllerCall(ctx, wire.OpUserAdd, wire.UserAddReq{Name: name, Gateway: true}, &r)
	return r, err
}

// UserList lists users.
func (c *Client) UserList(ctx context.Context) ([]wire.UserInfo, error) {
	var r wire.UserListResp
	err := c.ControllerCall(ctx, wire.OpUserList, wire.Empty{}, &r)
	return r.Users, err
}

// UserRevoke revokes a user's certificates and tokens.
func (c *Client) UserRevoke(ctx context.Context, name string) error {
	return c.ControllerCall(ctx, wire.OpUserRevoke, wire.UserRevokeReq{Name: name}, nil)
}

// ACLGet returns the ACL on a prefix.
func (c *Client) ACLGet(ctx context.Context, prefix string) (wire.ACLResp, error) {
	var r wire.ACLResp
	g, err := Clean(prefix)
	if err != nil {
		return r, err
	}
	err = c.ControllerCall(ctx, wire.OpACLGet, wire.ACLGetReq{Path: g, For: c.opts.ActFor}, &r)
	return r, err
}

// ACLSet changes entries of the ACL on a prefix.
func (c *Client) ACLSet(ctx context.Context, prefix string, entries []wire.ACLEntry, replace bool) error {
	g, err := Clean(prefix)
	if err != nil {
		return err
	}
	defer c.forgetMounts()
	return c.ControllerCall(ctx, wire.OpACLSet, wire.ACLSetReq{Path: g, Entries: entries, Replace: replace}, nil)
}

// Status returns the domain's health as the controller sees it
// (administrators only).
func (c *Client) Status(ctx context.Context) (wire.StatusResp, error) {
	var r wire.StatusResp
	err := c.ControllerCall(ctx, wire.OpStatus, wire.Empty{}, &r)
	return r, err
}

// TokenCreate asks the controller for a sign-in token of this client's
// user, for gateways, valid for ttl (0: the controller's default).
func (c *Client) TokenCreate(ctx context.Context, ttl time.Duration) (wire.TokenCreateResp, error) {
	var r wire.TokenCreateResp
	err := c.ControllerCall(ctx, wire.OpTokenCreate, wire.TokenCreateReq{TTL: int64(ttl)}, &r)
	return r, err
}

// TokenCheck asks the controller, for a gateway, whose sign-in token tok is.
func (c *Client) TokenCheck(ctx context.Context, tok []byte) (wire.TokenCheckResp, error) {
	var r wire.TokenCheckResp
	err := c.ControllerCall(ctx, wire.OpTokenCheck, wire.TokenCheckReq{Token: tok}, &r)
	return r, err
}

// UserPasswd sets the gateway password of user name ("": this client's).
func (c *Client) UserPasswd(ctx context.Context, name, password string) error {
	return c.ControllerCall(ctx, wire.OpUserPasswd, wire.UserPasswdReq{Name: name, Password: password}, nil)
}

// PasswordCheck asks the controller, for a gateway, whether password is
// user name's.
func (c *Client) PasswordCheck(ctx context.Context, name, password string) error {
	return c.ControllerCall(ctx, wire.OpPasswordCheck, wire.UserPasswdReq{Name: name, Password: password}, nil)
}

// S3KeyCreate makes an S3 access key for user name ("": this client's).
func (c *Client) S3KeyCreate(ctx context.Context, name string) (wire.S3KeyResp, error) {
	var r wire.S3KeyResp
	err := c.ControllerCall(ctx, wire.OpS3KeyCreate, wire.S3KeyReq{Name: name}, &r)
	return r, err
}

// S3KeyGet asks the controller, for a gateway, whose access key access is
// and its secret.
func (c *Client) S3KeyGet(ctx context.Context, access string) (wire.S3KeyResp, error) {
	var r wire.S3KeyResp
	err := c.ControllerCall(ctx, wire.OpS3KeyGet, wire.S3KeyReq{Access: access}, &r)
	return r, err
}
