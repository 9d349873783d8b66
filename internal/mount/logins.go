package mount

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

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
	uid map[uint32]*login
	// base: the IDMap's users the mount started with
	base map[string]uint32
}

type login struct {
	principal string
	v         *vfs.FS
	// closing: logged out; new requests of the uid are served as if it
	// had no login, those under way (inflight) end on v
	closing  bool
	inflight atomic.Int64
}

// hold counts a request of uid as under way on its login, if any, until
// the function returned is called.
func (m *Mount) hold(uid uint32) func() {
	if !m.logins.on {
		return func() {}
	}
	m.logins.mu.RLock()
	l := m.logins.uid[uid]
	if l != nil {
		l.inflight.Add(1)
	}
	m.logins.mu.RUnlock()
	if l == nil {
		return func() {}
	}
	return func() { l.inflight.Add(-1) }
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
	l := m.logins.uid[c.Uid]
	m.logins.mu.RUnlock()
	if l != nil {
		return l.v // while closing too: a request admitted as the login ends on it
	}
	return m.v
}

// loggedIn reports whether uid has logged in.
func (m *Mount) loggedIn(uid uint32) bool {
	if !m.logins.on {
		return false
	}
	m.logins.mu.RLock()
	l := m.logins.uid[uid]
	m.logins.mu.RUnlock()
	return l != nil && !l.closing
}

// idmap is the mount's current IDMap.
func (m *Mount) idmap() *IDMap { return m.ids.Load() }

// LoginsOn reports whether the mount accepts logins.
func (m *Mount) LoginsOn() bool { return m.logins.on }

// Login has uid's requests served by v, whose client acts as principal.
// Files of principal show as uid's. A login uid had is replaced (end it
// first with Logout to close it).
func (m *Mount) Login(uid uint32, principal string, v *vfs.FS) {
	m.logins.mu.Lock()
	defer m.logins.mu.Unlock()
	if m.logins.uid == nil {
		m.logins.uid = make(map[uint32]*login)
	}
	m.logins.uid[uid] = &login{principal: principal, v: v}
	m.setIDsLocked()
}

// Logout ends uid's login: its new requests are those of a uid with no
// login. It returns the login's vfs (nil if uid was not logged in) and
// idle, which reports whether no request under way and no open file
// uses it any longer; once it does, Forget drops it, and the caller may
// close it.
func (m *Mount) Logout(uid uint32) (v *vfs.FS, idle func() bool) {
	m.logins.mu.Lock()
	defer m.logins.mu.Unlock()
	l := m.logins.uid[uid]
	if l == nil || l.closing {
		return nil, nil
	}
	l.closing = true
	m.setIDsLocked()
	return l.v, func() bool { return l.inflight.Load() == 0 && !m.openOn(l.v) }
}

// Forget drops uid's login if it is the one of v and was logged out.
func (m *Mount) Forget(uid uint32, v *vfs.FS) {
	m.logins.mu.Lock()
	defer m.logins.mu.Unlock()
	if l := m.logins.uid[uid]; l != nil && l.v == v && l.closing {
		delete(m.logins.uid, uid)
	}
}

// openOn reports whether a file open here was opened through v.
func (m *Mount) openOn(v *vfs.FS) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for f := range m.files {
		if f.h.FS() == v {
			return true
		}
	}
	return false
}

// Logins returns the principal of each uid logged in.
func (m *Mount) Logins() map[uint32]string {
	m.logins.mu.RLock()
	defer m.logins.mu.RUnlock()
	out := make(map[uint32]string, len(m.logins.uid))
	for uid, l := range m.logins.uid {
		if !l.closing {
			out[uid] = l.principal
		}
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
		if l := m.logins.uid[uid]; !l.closing {
			users[l.principal] = uid
		}
	}
	ids.Users = users
	m.ids.Store(&ids)
}
