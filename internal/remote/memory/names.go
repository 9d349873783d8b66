package memory

import (
	"context"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/wire"
)

// The namespace's calls: each resolves its path, holds t.mu for the rest
// and answers as a share would.

// Stat returns gpath's attributes.
func (t *Tree) Stat(_ context.Context, gpath string) (wire.Attr, error) {
	loc, sh, err := t.where(gpath)
	if err != nil {
		return wire.Attr{}, err
	}
	defer t.mu.Unlock()
	if sh == nil {
		_, err := t.above(loc)
		return synthDir, err
	}
	n, err := sh.lookup(loc)
	if err != nil {
		return wire.Attr{}, err
	}
	return n.attr, nil
}

// ReadDirData lists gpath whole, with the bytes of its small files.
func (t *Tree) ReadDirData(_ context.Context, gpath string, fileMax, budget uint32) ([]wire.DirEntry, wire.Attr, map[string][]byte, error) {
	loc, sh, err := t.where(gpath)
	if err != nil {
		return nil, wire.Attr{}, nil, err
	}
	defer t.mu.Unlock()
	if sh == nil {
		names, err := t.above(loc)
		out := make([]wire.DirEntry, len(names))
		for i, name := range names {
			out[i] = wire.DirEntry{Name: name, Attr: synthDir}
		}
		return out, wire.Attr{}, nil, err
	}
	d, err := sh.dir(loc)
	if err != nil {
		return nil, wire.Attr{}, nil, err
	}
	var data map[string][]byte
	var out []wire.DirEntry
	for _, name := range sh.children(loc.Rel) {
		n := sh.nodes[join(loc.Rel, name)]
		e := wire.DirEntry{Name: name, Attr: n.attr}
		if n.attr.Mode&syscall.S_IFMT == syscall.S_IFREG && len(n.data) <= int(fileMax) && len(n.data) <= int(budget) {
			budget -= uint32(len(n.data))
			if data == nil {
				data = make(map[string][]byte)
			}
			data[name], e.Data = slices.Clone(n.data), true
		}
		out = append(out, e)
	}
	return out, d.attr, data, nil
}

// dir returns the directory at loc, t.mu held.
func (sh *share) dir(loc remote.Loc) (*node, error) {
	d, err := sh.lookup(loc)
	if err == nil && d.attr.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		err = wire.Errorf(wire.CodeNotDir, "%s: not a directory", loc.Global)
	}
	return d, err
}

// pageMax is the page size of ReadDirPage when the caller names none.
const pageMax = 1024

// ReadDirPage lists the entries of gpath after after.
func (t *Tree) ReadDirPage(ctx context.Context, gpath, after string, max uint32) ([]wire.DirEntry, bool, error) {
	entries, _, _, err := t.ReadDirData(ctx, gpath, 0, 0)
	if err != nil {
		return nil, false, err
	}
	if max == 0 {
		max = pageMax
	}
	i := sort.Search(len(entries), func(i int) bool { return entries[i].Name > after })
	entries = entries[i:]
	if len(entries) > int(max) {
		return entries[:max], true, nil
	}
	return entries, false, nil
}

// Readlink returns a symlink's target.
func (t *Tree) Readlink(_ context.Context, gpath string) (string, error) {
	loc, sh, err := t.where(gpath)
	if err != nil {
		return "", err
	}
	defer t.mu.Unlock()
	if sh == nil {
		return "", wire.Errorf(wire.CodeInvalid, "%s: not a symlink", loc.Global)
	}
	n, err := sh.lookup(loc)
	if err != nil {
		return "", err
	}
	if n.attr.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		return "", wire.Errorf(wire.CodeInvalid, "%s: not a symlink", loc.Global)
	}
	return n.target, nil
}

// StatFS returns made-up figures: a large file system, mostly free.
func (t *Tree) StatFS(_ context.Context, gpath string) (wire.StatFSResp, error) {
	_, sh, err := t.where(gpath)
	if err != nil {
		return wire.StatFSResp{}, err
	}
	t.mu.Unlock()
	_ = sh
	return wire.StatFSResp{Blocks: 1 << 30, Bfree: 1 << 29, Bavail: 1 << 29, Files: 1 << 20, Ffree: 1 << 19, Bsize: 4096, NameLen: 255}, nil
}

// make creates an entry at gpath with mode, from fill, t.mu taken.
func (t *Tree) make(ctx context.Context, gpath string, mode uint32, fill func(*node)) (wire.Attr, error) {
	loc, sh, err := t.where(gpath)
	if err != nil {
		return wire.Attr{}, err
	}
	defer t.mu.Unlock()
	if sh == nil {
		return wire.Attr{}, wire.Errorf(wire.CodeReadOnly, "%s: above the shares, nothing can be made", loc.Global)
	}
	d, err := sh.parentOf(loc)
	if err != nil {
		return wire.Attr{}, err
	}
	if sh.nodes[loc.Rel] != nil {
		return wire.Attr{}, wire.Errorf(wire.CodeExist, "%s: file exists", loc.Global)
	}
	n := t.newNode(sh, mode)
	cr := remote.CreatorOf(ctx)
	n.attr.Owner, n.attr.Group = cr.Owner, cr.Group
	if n.attr.Owner == "" {
		n.attr.Owner = t.principal
	}
	if fill != nil {
		fill(n)
	}
	sh.nodes[loc.Rel] = n
	t.touch(sh, n, loc.Rel, true)
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		d.attr.Nlink++
	}
	t.touch(sh, d, parentRel(loc.Rel), true)
	return n.attr, nil
}

// Mkdir makes a directory.
func (t *Tree) Mkdir(ctx context.Context, gpath string, mode uint32) (wire.Attr, error) {
	return t.make(ctx, gpath, syscall.S_IFDIR|mode&0o7777, nil)
}

// Mknod makes a special file (or an empty regular one).
func (t *Tree) Mknod(ctx context.Context, gpath string, mode, rdev uint32) (wire.Attr, error) {
	if mode&syscall.S_IFMT == 0 {
		mode |= syscall.S_IFREG
	}
	return t.make(ctx, gpath, mode, func(n *node) { n.attr.Rdev = uint64(rdev) })
}

// Symlink makes a symlink to target.
func (t *Tree) Symlink(ctx context.Context, target, gpath string) (wire.Attr, error) {
	return t.make(ctx, gpath, syscall.S_IFLNK|0o777, func(n *node) { n.target = target })
}

// Link makes newp another name of oldp.
func (t *Tree) Link(_ context.Context, oldp, newp string) (wire.Attr, error) {
	sh, from, to, err := t.two(oldp, newp)
	if err != nil {
		return wire.Attr{}, err
	}
	defer t.mu.Unlock()
	n, err := sh.lookup(from)
	if err != nil {
		return wire.Attr{}, err
	}
	if n.attr.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return wire.Attr{}, wire.Errorf(wire.CodePerm, "%s: a directory cannot be linked", from.Global)
	}
	d, err := sh.parentOf(to)
	if err != nil {
		return wire.Attr{}, err
	}
	if sh.nodes[to.Rel] != nil {
		return wire.Attr{}, wire.Errorf(wire.CodeExist, "%s: file exists", to.Global)
	}
	sh.nodes[to.Rel] = n
	n.attr.Nlink++
	t.touch(sh, n, to.Rel, false)
	t.touch(sh, d, parentRel(to.Rel), true)
	return n.attr, nil
}

// two resolves two paths that must be in one share; t.mu is held on
// return without error.
func (t *Tree) two(oldp, newp string) (*share, remote.Loc, remote.Loc, error) {
	to, _, err := t.where(newp)
	if err != nil {
		return nil, to, to, err
	}
	t.mu.Unlock()
	from, sh, err := t.where(oldp)
	if err != nil {
		return nil, from, to, err
	}
	if sh == nil || to.Share != from.Share {
		t.mu.Unlock()
		return nil, from, to, wire.Errorf(wire.CodeXDev, "%s and %s are not in one share", from.Global, to.Global)
	}
	return sh, from, to, nil
}

// Remove removes a file.
func (t *Tree) Remove(_ context.Context, gpath string) error { return t.unlink(gpath, false) }

// Rmdir removes an empty directory.
func (t *Tree) Rmdir(_ context.Context, gpath string) error { return t.unlink(gpath, true) }

func (t *Tree) unlink(gpath string, dir bool) error {
	loc, sh, err := t.where(gpath)
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	if sh == nil || loc.Rel == "" {
		return wire.Errorf(wire.CodePerm, "%s: not removable", loc.Global)
	}
	n, err := sh.lookup(loc)
	if err != nil {
		return err
	}
	isDir := n.attr.Mode&syscall.S_IFMT == syscall.S_IFDIR
	switch {
	case dir && !isDir:
		return wire.Errorf(wire.CodeNotDir, "%s: not a directory", loc.Global)
	case !dir && isDir:
		return wire.Errorf(wire.CodeIsDir, "%s: is a directory", loc.Global)
	case dir && len(sh.children(loc.Rel)) > 0:
		return wire.Errorf(wire.CodeNotEmpty, "%s: directory not empty", loc.Global)
	}
	sh.drop(t, loc.Rel, n)
	return nil
}

// drop removes the name rel of n, t.mu held.
func (sh *share) drop(t *Tree, rel string, n *node) {
	delete(sh.nodes, rel)
	d := sh.nodes[parentRel(rel)]
	if n.attr.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		d.attr.Nlink--
	} else {
		n.attr.Nlink--
	}
	t.touch(sh, n, rel, false)
	t.touch(sh, d, parentRel(rel), true)
}

// Rename moves oldp to newp.
func (t *Tree) Rename(_ context.Context, oldp, newp string, noReplace bool) error {
	sh, from, to, err := t.two(oldp, newp)
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	n, err := sh.lookup(from)
	if err != nil {
		return err
	}
	d, err := sh.parentOf(to)
	if err != nil {
		return err
	}
	if from.Rel == to.Rel {
		return nil
	}
	if remote.Under(to.Rel, from.Rel) {
		return wire.Errorf(wire.CodeInvalid, "%s: cannot be moved into itself", from.Global)
	}
	if old := sh.nodes[to.Rel]; old != nil {
		oldDir := old.attr.Mode&syscall.S_IFMT == syscall.S_IFDIR
		switch {
		case noReplace:
			return wire.Errorf(wire.CodeExist, "%s: file exists", to.Global)
		case oldDir && n.attr.Mode&syscall.S_IFMT != syscall.S_IFDIR:
			return wire.Errorf(wire.CodeIsDir, "%s: is a directory", to.Global)
		case oldDir && len(sh.children(to.Rel)) > 0:
			return wire.Errorf(wire.CodeNotEmpty, "%s: directory not empty", to.Global)
		}
		sh.drop(t, to.Rel, old)
	}
	for p, m := range sh.nodes {
		if p != from.Rel && remote.Under(p, from.Rel) {
			delete(sh.nodes, p)
			sh.nodes[to.Rel+p[len(from.Rel):]] = m
		}
	}
	sh.drop(t, from.Rel, n)
	n.attr.Nlink++
	if n.attr.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		d.attr.Nlink++
	}
	sh.nodes[to.Rel] = n
	t.touch(sh, n, to.Rel, false)
	t.touch(sh, d, parentRel(to.Rel), true)
	return nil
}

// SetAttrPrior changes what r names.
func (t *Tree) SetAttrPrior(_ context.Context, gpath string, r wire.SetAttrReq) (wire.AttrResp, error) {
	loc, sh, err := t.where(gpath)
	if err != nil {
		return wire.AttrResp{}, err
	}
	defer t.mu.Unlock()
	if sh == nil {
		return wire.AttrResp{}, wire.Errorf(wire.CodeReadOnly, "%s: above the shares", loc.Global)
	}
	n, err := sh.lookup(loc)
	if err != nil {
		return wire.AttrResp{}, err
	}
	prior := n.attr.Version
	if r.Valid&wire.SetMode != 0 {
		n.attr.Mode = n.attr.Mode&syscall.S_IFMT | r.Mode&0o7777
	}
	if r.Valid&wire.SetOwner != 0 {
		n.attr.Owner = r.Owner
	}
	if r.Valid&wire.SetGroup != 0 {
		n.attr.Group = r.Group
	}
	data := r.Valid&wire.SetSize != 0
	if data {
		if n.attr.Mode&syscall.S_IFMT != syscall.S_IFREG {
			return wire.AttrResp{}, wire.Errorf(wire.CodeInvalid, "%s: only a regular file has a size to set", loc.Global)
		}
		n.data = resize(n.data, r.Size)
	}
	t.touch(sh, n, loc.Rel, data)
	if r.Valid&wire.SetAtime != 0 {
		n.attr.Atime = r.Atime
	}
	if r.Valid&wire.SetMtime != 0 {
		n.attr.Mtime = r.Mtime
	}
	resp := wire.AttrResp{Attr: n.attr}
	if !data {
		resp.Prior = prior
	}
	return resp, nil
}

func resize(b []byte, size int64) []byte {
	if int64(len(b)) >= size {
		return b[:size]
	}
	return append(b, make([]byte, size-int64(len(b)))...)
}

// GetXattr returns an extended attribute.
func (t *Tree) GetXattr(_ context.Context, gpath, name string) ([]byte, error) {
	n, loc, err := t.xnode(gpath)
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	v, ok := n.xattr[name]
	if !ok {
		return nil, wire.Errorf(wire.CodeNoData, "%s: no attribute %s", loc.Global, name)
	}
	return slices.Clone(v), nil
}

// ListXattr names the extended attributes.
func (t *Tree) ListXattr(_ context.Context, gpath string) ([]string, error) {
	n, _, err := t.xnode(gpath)
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	var names []string
	for k := range n.xattr {
		names = append(names, k)
	}
	slices.Sort(names)
	return names, nil
}

// SetXattr sets an extended attribute.
func (t *Tree) SetXattr(_ context.Context, gpath, name string, value []byte, flags uint32) (wire.Attr, error) {
	n, loc, err := t.xnode(gpath)
	if err != nil {
		return wire.Attr{}, err
	}
	defer t.mu.Unlock()
	_, had := n.xattr[name]
	switch {
	case flags == wire.XattrCreate && had:
		return wire.Attr{}, wire.Errorf(wire.CodeExist, "%s: attribute %s exists", loc.Global, name)
	case flags == wire.XattrReplace && !had:
		return wire.Attr{}, wire.Errorf(wire.CodeNoData, "%s: no attribute %s", loc.Global, name)
	}
	if n.xattr == nil {
		n.xattr = make(map[string][]byte)
	}
	n.xattr[name] = slices.Clone(value)
	t.touch(t.shares[loc.Share], n, loc.Rel, false)
	return n.attr, nil
}

// RemoveXattr removes an extended attribute.
func (t *Tree) RemoveXattr(_ context.Context, gpath, name string) (wire.Attr, error) {
	n, loc, err := t.xnode(gpath)
	if err != nil {
		return wire.Attr{}, err
	}
	defer t.mu.Unlock()
	if _, had := n.xattr[name]; !had {
		return wire.Attr{}, wire.Errorf(wire.CodeNoData, "%s: no attribute %s", loc.Global, name)
	}
	delete(n.xattr, name)
	t.touch(t.shares[loc.Share], n, loc.Rel, false)
	return n.attr, nil
}

// xnode returns the node at gpath with t.mu held.
func (t *Tree) xnode(gpath string) (*node, remote.Loc, error) {
	loc, sh, err := t.where(gpath)
	if err != nil {
		return nil, loc, err
	}
	if sh == nil {
		t.mu.Unlock()
		return nil, loc, wire.Errorf(wire.CodeNotSupp, "%s: above the shares", loc.Global)
	}
	n, err := sh.lookup(loc)
	if err != nil {
		t.mu.Unlock()
		return nil, loc, err
	}
	return n, loc, nil
}

// invalMax is the most paths GetInvWait returns when max is 0.
const invalMax = 4096

// GetInvWait returns the changes at gpath's share after since; the first
// poll (since 0) is told to drop everything.
func (t *Tree) GetInvWait(ctx context.Context, gpath string, since uint64, max uint32, wait, _ time.Duration) (wire.GetInvResp, error) {
	if max == 0 {
		max = invalMax
	}
	var timer <-chan time.Time
	if wait > 0 {
		tm := time.NewTimer(wait)
		defer tm.Stop()
		timer = tm.C
	}
	for {
		loc, sh, err := t.where(gpath)
		if err != nil {
			return wire.GetInvResp{}, err
		}
		if sh == nil {
			t.mu.Unlock()
			return wire.GetInvResp{}, wire.Errorf(wire.CodeInvalid, "%s: above the shares, nothing is polled", loc.Global)
		}
		resp := wire.GetInvResp{Stamp: t.clock, Epoch: 1, Force: since == 0}
		i := sort.Search(len(sh.log), func(i int) bool { return sh.log[i].stamp > since })
		for _, r := range sh.log[i:] {
			if len(resp.Paths) == int(max) {
				resp.Again, resp.Stamp = true, r.stamp-1
				break
			}
			if !slices.Contains(resp.Paths, r.path) {
				resp.Paths = append(resp.Paths, r.path)
			}
		}
		changed := t.changed
		t.mu.Unlock()
		if len(resp.Paths) > 0 || resp.Force || timer == nil {
			return resp, nil
		}
		select {
		case <-changed:
		case <-timer:
			return resp, nil
		case <-ctx.Done():
			return wire.GetInvResp{}, ctx.Err()
		}
	}
}

// Validate reports every listing changed: the tree keeps no sums.
func (t *Tree) Validate(_ context.Context, gpath string, dirs []wire.DirCheck) (wire.ValidateResp, error) {
	_, _, err := t.where(gpath)
	if err != nil {
		return wire.ValidateResp{}, err
	}
	t.mu.Unlock()
	return wire.ValidateResp{Unchanged: make([]byte, (len(dirs)+7)/8)}, nil
}

// DelegReturn has nothing to take back: the tree grants no delegations.
func (t *Tree) DelegReturn(context.Context, string, uint64, []wire.ByteRange, bool) error {
	return nil
}

// DelegFail has nothing to keep: the tree grants no delegations.
func (t *Tree) DelegFail(context.Context, string, uint64, wire.Code, string) error { return nil }

// SetHealthHook has fn called when SetDown changes a share's state.
func (t *Tree) SetHealthHook(fn func(remote.HealthEvent)) {
	t.mu.Lock()
	t.hook = fn
	t.mu.Unlock()
}

// Health returns the shares marked down.
func (t *Tree) Health() []wire.ShareHealth {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []wire.ShareHealth
	for name := range t.shares {
		h := wire.ShareHealth{Share: name, Up: t.down[name] == nil}
		if !h.Up {
			h.LastErr = t.down[name].Error()
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b wire.ShareHealth) int { return strings.Compare(a.Share, b.Share) })
	return out
}

// DownErr returns the error SetDown gave share.
func (t *Tree) DownErr(share string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.down[share]
}

// Reachable returns the error SetDown gave gpath's share.
func (t *Tree) Reachable(_ context.Context, gpath string) error {
	loc := remote.Resolve(t.mounts, gpath)
	return t.DownErr(loc.Share)
}
