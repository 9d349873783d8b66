package controller

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/store"
	"pando.dev/pando/internal/wire"
)

// Credentials the controller keeps for gateways: a user's password (a
// slow hash in the user's record: pando user passwd) and S3 access keys
// (pando user s3-key; SigV4 needs the secret itself to check a signature,
// so it is kept as the controller's keys are, in its state). A user sets
// their own; an administrator sets anyone's. Only gateways may check a
// password or read a key's secret, and only for a live user: revoking a
// user voids both (a user added again starts with none).

// pfxS3Key keys the S3 access keys: s3key/ACCESS -> s3KeyRec.
const pfxS3Key = "s3key/"

type s3KeyRec struct {
	User    string `cbor:"1,keyasint"`
	Secret  string `cbor:"2,keyasint"`
	Created int64  `cbor:"3,keyasint"`
}

// Bounds of the credentials kept.
const (
	minPassword  = 8
	maxS3PerUser = 16 // access keys a user may have
)

// credentialsOf returns whose credentials a request names (name, or the
// caller), after checking that the caller may change them: their own, or
// anyone's for an administrator.
func (c *Controller) credentialsOf(ctx context.Context, p *peer, name string) (string, error) {
	if name == "" || name == p.id.Name && p.id.Role == auth.RoleUser {
		if p.id.Role != auth.RoleUser {
			return "", wire.Errorf(wire.CodeAccess, "%s is not a user and has no credentials to set", p.id)
		}
		return p.id.Name, nil
	}
	if err := auth.ValidName(name); err != nil {
		return "", wire.Errorf(wire.CodeInvalid, "user name: %v", err)
	}
	if _, err := c.require(ctx, p, "/", auth.Admin); err != nil {
		return "", err
	}
	return name, nil
}

// userPasswd sets a user's gateway password.
func (c *Controller) userPasswd(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.UserPasswdReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	name, err := c.credentialsOf(ctx, p, r.Name)
	if err != nil {
		return rpc.Reply{}, err
	}
	if len(r.Password) < minPassword || len(r.Password) > wire.MaxPassword {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "a password has %d to %d characters; choose another", minPassword, wire.MaxPassword)
	}
	h, err := auth.HashPassword(r.Password) // bounded, as every hash, by auth
	if err != nil {
		return rpc.Reply{}, err
	}
	for attempt := 0; ; attempt++ {
		old, err := c.st.Get(ctx, pfxUser+name)
		if errors.Is(err, store.ErrNotFound) {
			return rpc.Reply{}, wire.Errorf(wire.CodeNotExist, "user %s does not exist (see `pando user ls`)", name)
		}
		if err != nil {
			return rpc.Reply{}, err
		}
		var u userRec
		if err := wire.Unmarshal(old, &u); err != nil {
			return rpc.Reply{}, fmt.Errorf("state record %s is damaged: %w", pfxUser+name, err)
		}
		if u.Gateway || u.Revoked != 0 {
			return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "%s is a gateway or revoked: it signs in with no password", name)
		}
		u.Password = h
		val, err := wire.Marshal(u)
		if err != nil {
			return rpc.Reply{}, err
		}
		err = c.st.CompareAndSwap(ctx, pfxUser+name, old, val)
		if errors.Is(err, store.ErrConflict) && attempt < 10 {
			continue
		}
		return rpc.Reply{}, err
	}
}

// passwordCheck tells a gateway whether a password is a live user's.
func (c *Controller) passwordCheck(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.UserPasswdReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if err := onlyGateway(p, "check passwords"); err != nil {
		return rpc.Reply{}, err
	}
	wrong := wire.Errorf(wire.CodeAccess, "wrong user name or password")
	if auth.ValidName(r.Name) != nil || len(r.Password) > wire.MaxPassword {
		return rpc.Reply{}, wrong
	}
	u, err := c.liveUser(ctx, r.Name)
	h := ""
	if err == nil {
		h = u.Password
	}
	if h == "" {
		// As slow as a known user, so that timing tells no names.
		h = auth.NoPasswordHash
		err = wrong
	}
	good := auth.CheckPasswordHash(h, r.Password)
	if err != nil || !good {
		return rpc.Reply{}, wrong
	}
	return rpc.Reply{}, nil
}

// s3KeyCreate makes an S3 access key for a user.
func (c *Controller) s3KeyCreate(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.S3KeyReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	name, err := c.credentialsOf(ctx, p, r.Name)
	if err != nil {
		return rpc.Reply{}, err
	}
	u, err := c.liveUser(ctx, name)
	if err != nil {
		return rpc.Reply{}, err
	}
	keys, err := c.st.List(ctx, pfxS3Key)
	if err != nil {
		return rpc.Reply{}, err
	}
	n := 0
	for _, kv := range keys {
		var k s3KeyRec
		if wire.Unmarshal(kv.Value, &k) == nil && k.User == name && k.Created >= u.validFrom() {
			n++
		}
	}
	if n >= maxS3PerUser {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "%s has %d S3 access keys, the most a user may have", name, n)
	}
	var a [10]byte
	var s [30]byte
	_, _ = rand.Read(a[:])
	_, _ = rand.Read(s[:])
	access := "PK" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(a[:])
	rec := s3KeyRec{User: name, Secret: base64.RawURLEncoding.EncodeToString(s[:]), Created: time.Now().UnixNano()}
	val, err := wire.Marshal(rec)
	if err != nil {
		return rpc.Reply{}, err
	}
	if err := c.st.CompareAndSwap(ctx, pfxS3Key+access, nil, val); err != nil {
		return rpc.Reply{}, err
	}
	return rpc.Reply{Msg: wire.S3KeyResp{Access: access, Secret: rec.Secret, User: name}}, nil
}

// s3KeyGet gives a gateway the user and secret of an access key.
func (c *Controller) s3KeyGet(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.S3KeyReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if err := onlyGateway(p, "read S3 keys"); err != nil {
		return rpc.Reply{}, err
	}
	unknown := wire.Errorf(wire.CodeNotExist, "the S3 access key is not known")
	if r.Access == "" || len(r.Access) > 128 {
		return rpc.Reply{}, unknown
	}
	v, err := c.st.Get(ctx, pfxS3Key+r.Access)
	if errors.Is(err, store.ErrNotFound) {
		return rpc.Reply{}, unknown
	}
	if err != nil {
		return rpc.Reply{}, err
	}
	var k s3KeyRec
	if err := wire.Unmarshal(v, &k); err != nil {
		return rpc.Reply{}, unknown
	}
	u, err := c.liveUser(ctx, k.User)
	if err != nil {
		return rpc.Reply{}, err
	}
	if k.Created < u.validFrom() {
		return rpc.Reply{}, wire.Errorf(wire.CodeTokenRevoked, "the S3 access key was made before %s was revoked", k.User)
	}
	return rpc.Reply{Msg: wire.S3KeyResp{Access: r.Access, Secret: k.Secret, User: k.User}}, nil
}
