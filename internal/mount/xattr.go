package mount

import (
	"context"
	"syscall"

	"pando.dev/pando/internal/wire"
)

// Extended attributes: user.* ones are the share's (every call asks it);
// the vfs answers for the other namespaces itself.

// Getxattr copies the value of attr into dest; a dest too small for it
// (empty when the caller asks for the size) gets the size and ERANGE.
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if !wire.XattrTravels(attr) {
		// What ls -l asks of every entry (security.selinux,
		// system.posix_acl_access): no path to find, no request.
		return 0, syscall.ENODATA
	}
	ctx, done := detach(ctx)
	defer done()
	p := n.gpath()
	val, err := n.v(ctx).GetXattr(ctx, p, attr)
	if err != nil {
		return 0, n.m.fail("getxattr", p, err)
	}
	if len(dest) < len(val) {
		return uint32(len(val)), syscall.ERANGE
	}
	return uint32(copy(dest, val)), 0
}

// Listxattr fills dest with the attribute names, each ended by a NUL, as
// Getxattr does with a value.
func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	ctx, done := detach(ctx)
	defer done()
	p := n.gpath()
	names, err := n.v(ctx).ListXattr(ctx, p)
	if err != nil {
		return 0, n.m.fail("listxattr", p, err)
	}
	var list []byte
	for _, name := range names {
		list = append(append(list, name...), 0)
	}
	if len(dest) < len(list) {
		return uint32(len(list)), syscall.ERANGE
	}
	return uint32(copy(dest, list)), 0
}

// Setxattr sets attr; flags are setxattr(2)'s, which the protocol's are.
func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	ctx, done := detach(ctx)
	defer done()
	p := n.gpath()
	if wire.CheckXattrFlags(flags) != nil { // the protocol's values are Linux's
		return syscall.EINVAL
	}
	return n.m.fail("setxattr", p, n.v(ctx).SetXattr(ctx, p, attr, data, flags))
}

// Removexattr removes attr.
func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	ctx, done := detach(ctx)
	defer done()
	p := n.gpath()
	return n.m.fail("removexattr", p, n.v(ctx).RemoveXattr(ctx, p, attr))
}
