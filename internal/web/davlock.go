package web

import (
	"context"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/webdav"

	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wire"
)

// WebDAV locks of files are pando's locks at the share too: a LOCK takes
// a whole-file write lock (flock's kind: held by the gateway's share
// handle of the file, until UNLOCK or the lock's timeout), so that a lock
// held through the mount, another gateway or another agent makes the
// LOCK fail with 423, and a WebDAV lock holds them off in turn. The lock
// tokens, depth-infinity locks of collections and locks of names not
// made yet (lock-null) are this gateway's own (lockTable). A shared WebDAV
// lock of a file takes a whole-file read lock, so that several can be
// held at once, and none beside a write lock.
type gridLocks struct {
	mem  *lockTable
	mu   sync.Mutex
	held map[string]*gridLock // by token
	done chan struct{}
}

type gridLock struct {
	h       *vfs.File
	expires time.Time
}

func newGridLocks() *gridLocks {
	g := &gridLocks{mem: newLockTable(), held: map[string]*gridLock{}, done: make(chan struct{})}
	go g.expire()
	return g
}

// expire releases the share's locks of WebDAV locks whose time is over.
func (g *gridLocks) expire() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-g.done:
			return
		case now := <-t.C:
			g.mu.Lock()
			for tok, l := range g.held {
				if now.After(l.expires) {
					delete(g.held, tok)
					go l.release()
				}
			}
			g.mu.Unlock()
		}
	}
}

func (l *gridLock) release() {
	ctx := context.Background()
	l.h.Lock(ctx, vfs.LockRange{Type: wire.LockUnlock}, false, nil, true)
	l.h.Close(ctx)
}

// close releases every lock at the shares.
func (g *gridLocks) close() {
	close(g.done)
	g.mu.Lock()
	held := g.held
	g.held = map[string]*gridLock{}
	g.mu.Unlock()
	for _, l := range held {
		l.release()
	}
}

// davLS is the lock system of one request, made with its user's vfs;
// shared: the request is a LOCK asking for a shared lock (sharedLock).
type davLS struct {
	g      *gridLocks
	fs     *davFS
	shared bool
}

func (l davLS) Confirm(now time.Time, name0, name1 string, conditions ...webdav.Condition) (func(), error) {
	return l.g.mem.confirm(now, name0, name1, conditions...)
}

func expiry(now time.Time, d time.Duration) time.Time {
	if d < 0 {
		return now.Add(100 * 365 * 24 * time.Hour) // "Infinite"
	}
	return now.Add(d)
}

func (l davLS) Create(now time.Time, details webdav.LockDetails) (string, error) {
	tok, err := l.g.mem.create(now, details, l.shared)
	if err != nil {
		return tok, err
	}
	p, err := l.fs.clean(details.Root)
	if err != nil {
		return tok, nil
	}
	ctx := context.Background()
	a, err := l.fs.v.GetAttr(ctx, p)
	if err != nil || a.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return tok, nil // a collection, or a name not made yet: this gateway's lock only
	}
	kind := wire.LockWrite
	if l.shared {
		kind = wire.LockRead // several at once; none beside a write lock
	}
	// Shared or not, a WebDAV lock is a write lock: it needs the right.
	h, err := l.fs.v.OpenFile(ctx, p, syscall.O_RDWR, 0)
	if err == nil {
		if err = h.Lock(ctx, vfs.LockRange{Type: kind}, false, nil, true); err != nil {
			h.Close(ctx)
		}
	}
	if err != nil {
		l.g.mem.unlock(now, tok)
		if wire.CodeOf(err) == wire.CodeLocked || Errno(err) == syscall.EAGAIN {
			return "", webdav.ErrLocked
		}
		return "", l.fs.note(err)
	}
	l.g.mu.Lock()
	l.g.held[tok] = &gridLock{h: h, expires: expiry(now, details.Duration)}
	l.g.mu.Unlock()
	return tok, nil
}

func (l davLS) Refresh(now time.Time, token string, d time.Duration) (webdav.LockDetails, error) {
	ld, err := l.g.mem.refresh(now, token, d)
	if err == nil {
		l.g.mu.Lock()
		if gl := l.g.held[token]; gl != nil {
			gl.expires = expiry(now, d)
		}
		l.g.mu.Unlock()
	}
	return ld, err
}

func (l davLS) Unlock(now time.Time, token string) error {
	err := l.g.mem.unlock(now, token)
	l.g.mu.Lock()
	gl := l.g.held[token]
	delete(l.g.held, token)
	l.g.mu.Unlock()
	if gl != nil {
		gl.release()
	}
	return err
}
