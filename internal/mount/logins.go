package mount

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"

	"pando.dev/pando/internal/vfs"
)

// Logins (pando login, as AFS's aklog): on a mount started with
// Options.Logins, a local user may hand the agent their own credential,
// and from then on every request that uid makes is served by a vfs of its
// own (its own client with that credential, its own cache), so that the
// shares apply that person's rights, not the host's. The caller of each
// request is the uid FUSE names; node.v picks its vfs, and every node
// operation reaches the vfs only through it. An open file keeps the vfs
// it was opened with (its handle belongs to it). A uid with no login is
// served as before: by the mount's own vfs if it is the agent's uid or
// lent the mount (--lend-to), else refused by the guard.
//
// Such a mount is reachable by every uid (allow_other), so the kernel's
// caches, shared by all uids, must never answer one uid from what
// another fetched: it keeps no entries (entryTimeout) and no directory
// listings (OpendirHandle), as on a lent mount, and checks mode bits for
// each caller (default_permissions).

// logins holds the vfs of each uid logged in.
type logins struct {
	on  bool
	mu  sync.RWMutex
	uid map[uint32]login
	// base: the IDMap's users the mount started with
	base map[string]uint32
}

type login struct {
	principal string
	v         *vfs.FS
}

// vfsFor is the vfs that serves the caller of the request in ctx.
func (m *Mount) vfsFor(ctx context.Context) *vfs.FS {
	if !m.logins.on {
		return m.v
	}
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return m.v
	}
	m.logins.mu.RLock()
	l, in := m.logins.uid[c.Uid]
	m.logins.mu.RUnlock()
	if in {
		return l.v
	}
	return m.v
}

// loggedIn reports whether uid has logged in.
func (m *Mount) loggedIn(uid uint32) bool {
	if !m.logins.on {
		return false
	}
	m.logins.mu.RLock()
	_, in := m.logins.uid[uid]
	m.logins.mu.RUnlock()
	return in
}

// idmap is the mount's current IDMap.
func (m *Mount) idmap() *IDMap { return m.ids.Load() }

// LoginsOn reports whether the mount accepts logins.
func (m *Mount) LoginsOn() bool { return m.logins.on }

// Login has uid's requests served by v, whose client acts as principal;
// the uid's earlier vfs, if any, is returned for the caller to close.
// Files of principal show as uid's.
func (m *Mount) Login(uid uint32, principal string, v *vfs.FS) (old *vfs.FS) {
	m.logins.mu.Lock()
	defer m.logins.mu.Unlock()
	if m.logins.uid == nil {
		m.logins.uid = make(map[uint32]login)
	}
	if l, in := m.logins.uid[uid]; in {
		old = l.v
	}
	m.logins.uid[uid] = login{principal: principal, v: v}
	m.setIDsLocked()
	return old
}

// Logout ends uid's login and returns its vfs for the caller to close
// (nil if uid was not logged in). Its requests are then those of a uid
// with no login.
func (m *Mount) Logout(uid uint32) *vfs.FS {
	m.logins.mu.Lock()
	defer m.logins.mu.Unlock()
	l, in := m.logins.uid[uid]
	if !in {
		return nil
	}
	delete(m.logins.uid, uid)
	m.setIDsLocked()
	return l.v
}

// Logins returns the principal of each uid logged in.
func (m *Mount) Logins() map[uint32]string {
	m.logins.mu.RLock()
	defer m.logins.mu.RUnlock()
	out := make(map[uint32]string, len(m.logins.uid))
	for uid, l := range m.logins.uid {
		out[uid] = l.principal
	}
	return out
}

// setIDsLocked shows each logged-in principal as its uid, over the
// --map-user entries the mount started with (logins.mu held).
func (m *Mount) setIDsLocked() {
	ids := *m.ids.Load()
	users := maps.Clone(m.logins.base)
	if users == nil {
		users = make(map[string]uint32)
	}
	for _, uid := range slices.Sorted(maps.Keys(m.logins.uid)) {
		users[m.logins.uid[uid].principal] = uid
	}
	ids.Users = users
	m.ids.Store(&ids)
}
