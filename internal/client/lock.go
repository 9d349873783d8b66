package client

import (
	"context"

	"pando.dev/pando/internal/wire"
)

// Lock takes (typ wire.LockRead or wire.LockWrite) or releases
// (wire.LockUnlock) a lock on length bytes from start (length 0: to the end
// of the file), held by the share for this handle until it is released or
// the handle closes. A conflicting lock fails it with wire.CodeLocked.
func (f *File) Lock(ctx context.Context, typ uint8, start, length int64) error {
	_, err := f.lock(ctx, typ, start, length, false)
	return err
}

// TestLock returns a lock that would conflict with the one described, or
// one of Type wire.LockUnlock when none would.
func (f *File) TestLock(ctx context.Context, typ uint8, start, length int64) (wire.LockResp, error) {
	return f.lock(ctx, typ, start, length, true)
}

func (f *File) lock(ctx context.Context, typ uint8, start, length int64, test bool) (wire.LockResp, error) {
	var resp wire.LockResp
	_, _, err := f.c.call(ctx, f.loc, wire.OpLock, func(tok uint32) any {
		return wire.LockReq{Tok: tok, Handle: f.handle, Type: typ, Start: start, Len: length, Test: test}
	}, nil, &resp, nil, f.conn, false)
	return resp, named(err, f.loc)
}
