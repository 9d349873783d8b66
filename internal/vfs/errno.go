package vfs

import (
	"context"
	"errors"
	"io/fs"
	"syscall"

	"pando.dev/pando/internal/wire"
)

// Errno translates an error of the vfs into the errno an edge reports (0
// for nil): the mount hands it to the kernel, the gateways map it to
// their protocol's statuses.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if errors.Is(err, ErrUnreachable) {
		// Before the errno a refused dial carries (ECONNREFUSED): the
		// share, not a local socket, is what cannot be reached.
		return syscall.EHOSTUNREACH
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Errno()
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, fs.ErrPermission):
		return syscall.EACCES
	case errors.Is(err, fs.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	}
	return syscall.EIO
}
