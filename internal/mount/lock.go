package mount

import (
	"context"
	"math"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wire"
)

// Locks, fcntl's and flock's alike, are held by the share for the open
// file they are taken through (see vfs.Handle.Lock): two opens' locks
// conflict, in one agent or in two, as open-file-description locks do.

var (
	_ fs.FileGetlker  = (*file)(nil)
	_ fs.FileSetlker  = (*file)(nil)
	_ fs.FileSetlkwer = (*file)(nil)
)

// lockRange converts the kernel's lock (an inclusive end, the largest
// offset for "to the end of the file") to the protocol's.
func lockRange(lk *fuse.FileLock) (vfs.LockRange, syscall.Errno) {
	if lk.Start > math.MaxInt64 || lk.End < lk.Start {
		return vfs.LockRange{}, syscall.EINVAL
	}
	l := vfs.LockRange{Type: uint8(lk.Typ), Start: int64(lk.Start)}
	if lk.End < math.MaxInt64 {
		l.Len = int64(lk.End-lk.Start) + 1
	}
	return l, 0
}

// Getlk reports a lock that would conflict with lk.
func (f *file) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	l, e := lockRange(lk)
	if e != 0 {
		return e
	}
	r, err := f.h.TestLock(context.WithoutCancel(ctx), l)
	if err != nil {
		return f.m.fail("getlk", f.h.Path(), err)
	}
	*out = fuse.FileLock{Typ: uint32(r.Type)}
	if r.Type != wire.LockUnlock {
		out.Start, out.End = uint64(r.Start), math.MaxInt64
		if r.Len > 0 {
			out.End = uint64(r.Start + r.Len - 1)
		}
	}
	return 0
}

// Setlk takes or releases a lock, failing with EAGAIN on a conflict.
func (f *file) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.setlk(ctx, lk, flags, false)
}

// Setlkw takes a lock, waiting for it until the caller is interrupted.
func (f *file) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.setlk(ctx, lk, flags, true)
}

func (f *file) setlk(ctx context.Context, lk *fuse.FileLock, flags uint32, wait bool) syscall.Errno {
	l, e := lockRange(lk)
	if e != 0 {
		return e
	}
	// The calls to the share run to the end, so that the share's locks
	// and the caller's idea of them agree; only a wait is cut short.
	err := f.h.Lock(context.WithoutCancel(ctx), l, wait, ctx.Done(), flags&fuse.FUSE_LK_FLOCK != 0)
	if wire.CodeOf(err) == wire.CodeLocked {
		return syscall.EAGAIN
	}
	return f.m.fail("lock", f.h.Path(), err)
}
