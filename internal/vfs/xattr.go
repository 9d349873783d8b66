package vfs

import (
	"context"
	"syscall"

	"pando.dev/pando/internal/wire"
)

// Extended attributes. Only user.* attributes travel (wire.XattrTravels);
// the agent answers for every other namespace itself, with no round trip:
// there are none (ENODATA), and none can be set or removed (ENOTSUP). The
// kernel asks for security.capability before writes and ls for
// system.posix_acl_access on every file, so these answers must be free.
//
// Attributes are not cached: every call asks the share, in every mode, so
// they are as fresh as the share's. A change moves the file's ctime, and
// so its version, on: the agent keeps the attributes the share replied
// with, as for setattr.

// GetXattr returns the whole value of p's extended attribute name.
func (v *FS) GetXattr(ctx context.Context, p, name string) ([]byte, error) {
	if !wire.XattrTravels(name) {
		return nil, syscall.ENODATA
	}
	if name == StaleXattr {
		if val, ok := v.staleValue(ctx, p); ok {
			return val, nil
		}
	}
	val, err := v.c.GetXattr(ctx, p, name)
	if name == StaleXattr && unreachable(err) {
		// Found out just now.
		if val, ok := v.staleValue(ctx, p); ok {
			return val, nil
		}
	}
	return val, err
}

// ListXattr returns the names of p's extended attributes.
func (v *FS) ListXattr(ctx context.Context, p string) ([]string, error) {
	if _, ok := v.staleValue(ctx, p); ok {
		return []string{StaleXattr}, nil
	}
	names, err := v.c.ListXattr(ctx, p)
	if err != nil {
		return nil, err
	}
	kept := names[:0]
	for _, n := range names {
		if wire.XattrTravels(n) { // whatever a share sends
			kept = append(kept, n)
		}
	}
	return kept, nil
}

// SetXattr sets p's extended attribute name; flags are wire.XattrCreate
// or wire.XattrReplace.
func (v *FS) SetXattr(ctx context.Context, p, name string, value []byte, flags uint32) error {
	if !wire.XattrTravels(name) {
		return syscall.ENOTSUP
	}
	if err := v.downErr(ctx, p); err != nil {
		return err
	}
	d := v.dropCount()
	a, err := v.c.SetXattr(ctx, p, name, value, flags)
	return v.changedXattr(p, a, d, err)
}

// RemoveXattr removes p's extended attribute name.
func (v *FS) RemoveXattr(ctx context.Context, p, name string) error {
	if !wire.XattrTravels(name) {
		return syscall.ENOTSUP
	}
	if err := v.downErr(ctx, p); err != nil {
		return err
	}
	d := v.dropCount()
	a, err := v.c.RemoveXattr(ctx, p, name)
	return v.changedXattr(p, a, d, err)
}

// changedXattr drops what is cached of p after a change of its attributes
// and keeps the attributes the share replied with (d: see setOwn).
func (v *FS) changedXattr(p string, a wire.Attr, d uint64, err error) error {
	v.forget(p)
	if err == nil {
		v.setOwn(p, a, d)
	}
	return err
}
