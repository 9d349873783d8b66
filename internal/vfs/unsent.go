package vfs

import (
	"context"
	"errors"
	"io/fs"
	"sort"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/wire"
)

// Why unsent data waits. Every loop that sends a file's data and fails
// without dropping it (the write delegation's timer and recalls, the
// retry of unsent data) notes the failure here, per file: its cause as an
// errno (ENOSPC: the share's disk is full; EHOSTUNREACH: the share cannot
// be reached; ...), when it last happened and how many attempts failed in
// a row. A send that succeeds forgets it. `pando stats` and /metrics show
// every file with data not yet at its share, kept back under a write
// delegation or not, with the last failure if any.

// sendFailure is the last failure to send a file's data.
type sendFailure struct {
	path     string
	errno    syscall.Errno
	msg      string
	when     time.Time
	attempts int
}

type sendFailures struct {
	mu sync.Mutex
	m  map[string]*sendFailure // by cache key
}

// noteSendFailure records that sending key's data (the file at p) failed
// with err.
func (v *FS) noteSendFailure(key, p string, err error) {
	if err == nil {
		return
	}
	v.fails.mu.Lock()
	defer v.fails.mu.Unlock()
	if v.fails.m == nil {
		v.fails.m = make(map[string]*sendFailure)
	}
	f := v.fails.m[key]
	if f == nil {
		f = &sendFailure{}
		v.fails.m[key] = f
	}
	f.path, f.errno, f.msg, f.when = p, causeErrno(err), err.Error(), time.Now()
	f.attempts++
}

// noteSent forgets the failures of key: its data reached the share (or
// was dropped).
func (v *FS) noteSent(key string) {
	v.fails.mu.Lock()
	delete(v.fails.m, key)
	v.fails.mu.Unlock()
}

// causeErrno is the errno that says why a send failed (as the mount
// would report it).
func causeErrno(err error) syscall.Errno {
	if errors.Is(err, remote.ErrUnreachable) {
		return syscall.EHOSTUNREACH
	}
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Errno()
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	}
	return syscall.EIO
}

// causeName names an errno as in C (ENOSPC).
func causeName(e syscall.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return e.Error()
}

// UnsentFile is a file with data not yet at its share, as `pando stats`
// shows it.
type UnsentFile struct {
	Path string `json:"path"`
	// Bytes is the size of the file's blocks that hold unsent data.
	Bytes int64 `json:"bytes"`
	// KeptBack: the data is kept back under a write delegation (write
	// mode back), which sends it.
	KeptBack bool `json:"kept_back,omitempty"`
	// The last failure to send it, if any: its cause (an errno name,
	// e.g. ENOSPC for a full disk at the share), the errno, the error,
	// when, and how many attempts in a row failed.
	Cause    string    `json:"cause,omitempty"`
	Errno    int       `json:"errno,omitempty"`
	Error    string    `json:"error,omitempty"`
	Last     time.Time `json:"last_failure,omitzero"`
	Attempts int       `json:"attempts,omitempty"`
}

// UnsentFiles lists the files with data not yet at their share that no
// open file holds (those kept back under a write delegation included),
// by path.
func (v *FS) UnsentFiles() []UnsentFile {
	keys := v.cache.DirtyKeys()
	v.mu.Lock()
	kept := make(map[string]bool, len(v.wdelegs))
	for _, d := range v.wdelegs {
		kept[d.key] = true
	}
	v.mu.Unlock()
	live := make(map[string]bool, len(keys))
	var out []UnsentFile
	v.fails.mu.Lock()
	for _, e := range keys {
		live[e.Key] = true
		if e.Pinned {
			continue
		}
		u := UnsentFile{Path: e.Name, Bytes: v.cache.DirtyBytesOf(e.Key), KeptBack: kept[e.Key]}
		if f := v.fails.m[e.Key]; f != nil {
			if u.Path == "" {
				u.Path = f.path
			}
			u.Cause, u.Errno, u.Error, u.Last, u.Attempts = causeName(f.errno), int(f.errno), f.msg, f.when, f.attempts
		}
		out = append(out, u)
	}
	for k := range v.fails.m {
		if !live[k] {
			delete(v.fails.m, k) // sent or dropped by a path that did not say
		}
	}
	v.fails.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Unsent counts files with dirty data that no open file holds (those a
// write delegation keeps back included).
func (v *FS) Unsent() int { return len(v.UnsentFiles()) }
