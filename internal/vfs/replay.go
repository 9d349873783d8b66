package vfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path"
	"sync"
	"syscall"
	"time"

	"pando.dev/pando/internal/fault"
	"pando.dev/pando/internal/wire"
)

// Unsent data is data in the cache marked dirty that no open file will
// send: left by an agent that was killed, or by a close that failed (share
// unreachable) on a file nobody reopened. The agent replays it at start and
// then retries, every retryMin doubling up to retryMax while some of it
// waits for an unreachable share, otherwise every retryMax and retryMin
// after a write-back that left data dirty.
//
// Replay compares the file's version at its share with the version the
// data was written against (the cache entry's, which write-back advances
// after each block the share acknowledged):
//   - the same version: the data is sent, as a close would;
//   - another version, but the share already holds exactly these bytes
//     (the agent stopped after sending them, before marking them clean):
//     nothing to do;
//   - another version, another file at that name, or none: a conflict.
//     The share's file is left as it is; the local version (the cached
//     blocks with the dirty ranges) is written beside it as
//     NAME.conflict-HOST-YYYYMMDD-HHMMSS (UTC; -2, -3... if taken), first
//     under a hidden temporary name, synced, then renamed into place; only
//     then is the cache entry dropped. Blocks of the old version the cache
//     no longer holds cannot be fetched any more: they are zeros in the
//     copy, which is reported as partial. If the directory is gone too, the
//     data stays dirty in the cache, is reported, and is tried again.
const (
	retryMin = time.Second
	retryMax = time.Minute
)

// Conflict is unsent data that met a changed file at its share.
type Conflict struct {
	Path string `json:"path"`
	// Kept is where the local version was written; empty when it could
	// not be (it then stays dirty in the cache).
	Kept string `json:"kept,omitempty"`
	// What happened to the file at the share: "changed", "replaced" (the
	// name is another file now) or "deleted".
	Change string `json:"change"`
	// Partial: blocks of the old version were no longer cached, so the
	// copy holds the bytes written here and zeros elsewhere.
	Partial bool      `json:"partial,omitempty"`
	Reason  string    `json:"reason,omitempty"` // why it could not be kept
	Time    time.Time `json:"time"`
}

// ReplayResult counts what one replay did.
type ReplayResult struct {
	Sent      int // sent to the share
	Clean     int // already at the share
	Conflicts int // kept beside the changed file, or reported
	Refused   int // refused by the share for good: dropped (see refuse)
	Waiting   int // the share could not be reached; retried
}

type replayState struct {
	mu        sync.Mutex // one replay at a time
	smu       sync.Mutex // guards the fields below
	busy      map[string]*sending
	conflicts []Conflict
	stuck     map[string]int  // conflicts not kept beside: index in conflicts
	warned    map[string]bool // a waiting file reported once
	kick      chan struct{}   // a write-back left data dirty
	// settling is the file replayOne works on (one at a time, under mu):
	// its pins and write-back are the replay's, not an open file's.
	settling string
}

// sending is a write-back under way.
type sending struct {
	n      int // concurrent write-backs of the key
	blocks int // blocks the share acknowledged in the current one
}

type replayingKey struct{}

// beginSend marks key as being written back and persists the cache index,
// so that an agent killed from here on finds the data still dirty. The
// returned function ends the mark.
func (v *FS) beginSend(key string) func() {
	v.rp.smu.Lock()
	if v.rp.busy == nil {
		v.rp.busy = make(map[string]*sending)
	}
	s := v.rp.busy[key]
	if s == nil {
		s = &sending{}
		v.rp.busy[key] = s
	}
	s.n++
	s.blocks = 0
	v.rp.smu.Unlock()
	if err := v.cache.PersistIndex(); err != nil {
		v.log.Warn("cannot write the cache index before a write-back", "err", err)
	}
	return func() {
		v.rp.smu.Lock()
		if s.n--; s.n == 0 {
			delete(v.rp.busy, key)
		}
		v.rp.smu.Unlock()
		if v.cache.Unsent(key) {
			// The write-back failed (or the file was written again):
			// have the retry look soon rather than at its next round.
			select {
			case v.rp.kickChan() <- struct{}{}:
			default:
			}
		}
	}
}

func (r *replayState) kickChan() chan struct{} {
	r.smu.Lock()
	defer r.smu.Unlock()
	if r.kick == nil {
		r.kick = make(chan struct{}, 1)
	}
	return r.kick
}

// sent records that the share's stage took a block of key's dirty data.
// The file at the share is unchanged until the commit: an agent killed
// from here on finds its data dirty against the version it was written
// on, and sends all of it again.
func (v *FS) sent(key string) {
	v.rp.smu.Lock()
	first := false
	if s := v.rp.busy[key]; s != nil {
		s.blocks++
		first = s.blocks == 1
	}
	v.rp.smu.Unlock()
	if first {
		fault.Crash("vfs.writeback.after-first-block")
	}
}

// sendingNow reports whether key's data is being written back, or kept
// back under a write delegation (which sends it itself).
func (v *FS) sendingNow(key string) bool {
	v.rp.smu.Lock()
	busy := v.rp.busy[key] != nil
	v.rp.smu.Unlock()
	if busy {
		return true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, d := range v.wdelegs {
		if d.key == key {
			return true
		}
	}
	return false
}

// Conflicts lists the conflicts met since the agent started.
func (v *FS) Conflicts() []Conflict {
	v.rp.smu.Lock()
	defer v.rp.smu.Unlock()
	return append([]Conflict(nil), v.rp.conflicts...)
}

// RetryUnsent replays unsent data at once and then retries until quit is
// closed (see the comment on retryMin).
func (v *FS) RetryUnsent(log *slog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-v.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	kick := v.rp.kickChan()
	wait := retryMin
	for {
		// A round may copy large files beside their changed versions.
		rctx, rcancel := context.WithTimeout(ctx, time.Hour)
		r := v.Replay(rctx, log)
		rcancel()
		if r.Waiting > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
				wait = min(2*wait, retryMax)
			case <-kick:
				wait = retryMin // a share came back, or a write-back failed
			}
			continue
		}
		wait = retryMin
		select {
		case <-ctx.Done():
			return
		case <-time.After(retryMax):
		case <-kick:
			// Give the file's release (which unpins it) a moment.
			select {
			case <-ctx.Done():
				return
			case <-time.After(retryMin):
			}
		}
	}
}

// Replay handles the unsent data once.
func (v *FS) Replay(ctx context.Context, log *slog.Logger) ReplayResult {
	v.rp.mu.Lock()
	defer v.rp.mu.Unlock()
	ctx = context.WithValue(ctx, replayingKey{}, true)
	var r ReplayResult
	for _, e := range v.cache.DirtyKeys() {
		if ctx.Err() != nil {
			break
		}
		if e.Pinned || v.sendingNow(e.Key) {
			continue
		}
		if e.Name == "" {
			if v.warnOnce(e.Key) {
				log.Warn("unsent data of a file whose name is not known; kept in the cache", "key", e.Key)
			}
			continue
		}
		err := v.replayOne(ctx, log, e.Key, e.Name)
		if err == nil || errors.Is(err, errAlreadySent) || errors.Is(err, errConflict) || wire.Permanent(err) {
			v.noteSent(e.Key)
		} else {
			v.noteSendFailure(e.Key, e.Name, err)
		}
		if (err == nil || errors.Is(err, errAlreadySent)) && v.unwarn(e.Key) {
			log.Warn("unsent data that waited for its share has reached it", "path", e.Name)
		}
		switch {
		case err == nil:
			r.Sent++
		case errors.Is(err, errAlreadySent):
			r.Clean++
		case errors.Is(err, errConflict):
			v.unwarn(e.Key)
			r.Conflicts++
		case wire.Permanent(err):
			// Never sent again. A refused write-back has dropped the
			// data already; a refused look-up or open has not.
			v.unwarn(e.Key)
			if len(v.cache.Dirty(e.Key)) > 0 {
				v.refuse(ctx, e.Key, e.Name, nil, err)
			}
			r.Refused++
		default:
			r.Waiting++
			if v.warnOnce(e.Key) {
				log.Warn("unsent data waits for its share; kept in the cache and retried", "path", e.Name, "err", err)
			}
		}
	}
	return r
}

var (
	errAlreadySent = errors.New("the share already holds the data")
	errConflict    = errors.New("the file changed at its share")
)

// reconcileAtOpen settles unsent data of key before an open uses it: an
// open must not adopt a newer version under data written against an older
// one (its close would write that data over the newer version).
func (v *FS) reconcileAtOpen(ctx context.Context, key, p string, a wire.Attr) {
	if ctx.Value(replayingKey{}) != nil {
		return
	}
	pending := func() bool {
		ver, _, ok := v.cache.Version(key)
		if !ok || ver == a.Version || !v.cache.Unsent(key) {
			return false
		}
		// An open file or a write-back under way sends the data; but
		// the replay pins the file too, while it compares it with the
		// share's or copies it beside, and then drops the cache entry:
		// an open that went ahead meanwhile would read from a file the
		// cache no longer holds (nothing).
		return v.settling(key) || !v.cache.Pinned(key) && !v.sendingNow(key)
	}
	if !pending() {
		return
	}
	v.rp.mu.Lock()
	defer v.rp.mu.Unlock()
	if !pending() {
		return
	}
	// p names this very file (key comes from its attributes), whatever
	// name the cache last saw it under.
	ctx = context.WithValue(ctx, replayingKey{}, true)
	err := v.replayOne(ctx, v.log, key, p)
	switch {
	case err == nil, errors.Is(err, errAlreadySent), errors.Is(err, errConflict):
	case wire.Permanent(err):
		if len(v.cache.Dirty(key)) > 0 {
			v.refuse(ctx, key, p, nil, err)
		}
	default:
		v.log.Warn("unsent data of a file being opened waits for its share", "path", p, "err", err)
	}
}

// replayOne sends, or keeps beside, the unsent data of key, last seen at
// name. It returns nil (sent), errAlreadySent, errConflict (kept beside or
// reported), or the error that makes it wait.
func (v *FS) replayOne(ctx context.Context, log *slog.Logger, key, name string) error {
	v.rp.smu.Lock()
	v.rp.settling = key
	v.rp.smu.Unlock()
	defer func() {
		v.rp.smu.Lock()
		v.rp.settling = ""
		v.rp.smu.Unlock()
	}()
	a, err := v.c.Stat(ctx, name)
	if gone(err) {
		return v.keepBeside(ctx, log, key, name, nil, "deleted")
	}
	if err != nil {
		return err
	}
	if a.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return v.keepBeside(ctx, log, key, name, &a, "replaced")
	}
	k, err := v.Key(ctx, name, a)
	if err != nil {
		return err
	}
	if k != key {
		return v.keepBeside(ctx, log, key, name, &a, "replaced")
	}
	ver, size, _ := v.cache.Version(key)
	if a.Version == ver {
		h, err := v.Open(ctx, name, syscall.O_RDWR)
		if err != nil {
			return err
		}
		if err := h.Release(ctx); err != nil {
			return err
		}
		log.Info("sent data left unsent earlier", "path", name)
		return nil
	}
	if a.Size == size {
		same, err := v.shareHolds(ctx, key, name)
		if err != nil {
			return err
		}
		if same {
			v.cache.Drop(key)
			log.Info("data left unsent earlier had reached the share already", "path", name)
			return errAlreadySent
		}
	}
	return v.keepBeside(ctx, log, key, name, &a, "changed")
}

// settling reports whether the replay is working on key.
func (v *FS) settling(key string) bool {
	v.rp.smu.Lock()
	defer v.rp.smu.Unlock()
	return v.rp.settling == key
}

// gone reports whether err says that a path does not exist at its share,
// as opposed to its share not being known (not registered, not mounted in
// the namespace any more), which may pass.
func gone(err error) bool {
	var we *wire.Error
	if errors.As(err, &we) && we.Code == wire.CodeNotRegistered {
		return false
	}
	return errors.Is(err, fs.ErrNotExist)
}

// errNotCached is what the cache's fetcher returns when replay reads the
// local version: nothing of an old version can be fetched any more.
var errNotCached = errors.New("block not cached")

func noFetch(context.Context, []byte, int64) (int, error) { return 0, errNotCached }

// shareHolds reports whether the file at name holds the dirty ranges of
// key byte for byte.
func (v *FS) shareHolds(ctx context.Context, key, name string) (bool, error) {
	f, err := v.data.Open(ctx, name, wire.OpenRead)
	if err != nil {
		return false, err
	}
	defer f.Close(context.Background())
	v.cache.Pin(key)
	defer v.cache.Unpin(key)
	const chunk = 4 << 20
	mine, theirs := make([]byte, chunk), make([]byte, chunk)
	for _, r := range v.cache.Dirty(key) {
		for off := r.Off; off < r.End(); off += chunk {
			n := min(chunk, r.End()-off)
			got, err := v.cache.ReadAt(ctx, key, mine[:n], off, noFetch)
			if err != nil && !errors.Is(err, io.EOF) {
				return false, fmt.Errorf("reading unsent data from the cache: %w", err)
			}
			m, err := f.ReadAt(ctx, theirs[:n], off)
			if err != nil && !errors.Is(err, io.EOF) {
				return false, err
			}
			if int64(got) != n || int64(m) != n || !bytes.Equal(mine[:n], theirs[:n]) {
				return false, nil
			}
		}
	}
	return true, nil
}

// keepBeside writes the local version of key next to name (whose file at
// the share, cur, changed, was replaced or is gone), then drops the cache
// entry. It returns errConflict once the conflict is reported, or the
// error that makes it wait.
func (v *FS) keepBeside(ctx context.Context, log *slog.Logger, key, name string, cur *wire.Attr, change string) error {
	c := Conflict{Path: name, Change: change, Time: time.Now().UTC()}
	dir := path.Dir(name)
	da, err := v.c.Stat(ctx, dir)
	if err == nil && da.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		err = fmt.Errorf("%s is not a directory any more: %w", dir, fs.ErrNotExist)
	}
	if gone(err) {
		c.Reason = "its directory is gone too; the data stays in the cache (pando cache ls)"
		return v.report(log, key, c, err)
	}
	if err != nil {
		return err
	}
	mode := uint32(0o600)
	if cur != nil {
		mode = cur.Mode & 0o777
	} else if pa, ok := v.persistedAttr(name); ok {
		mode = pa.Mode & 0o777
	}
	kept, partial, err := v.writeLocalVersion(ctx, key, name, mode)
	if wire.Permanent(err) || wire.CodeOf(err) == wire.CodeNoSpace {
		// The data was this agent's to send when it was written, and
		// conflicts with another version now: it is kept, not dropped
		// as a write refused outright would be, and tried again slowly.
		c.Reason = "the copy could not be written (" + err.Error() + "); the data stays in the cache (pando cache ls)"
		return v.report(log, key, c, err)
	}
	if err != nil {
		return err
	}
	c.Kept, c.Partial = kept, partial
	fault.Crash("vfs.replay.before-drop")
	v.cache.Drop(key)
	v.forget(kept)
	v.notifyKernel(kept, false)
	return v.report(log, key, c, nil)
}

// report records and logs a conflict. A conflict whose local version
// could not be kept beside the file is recorded once: its data stays dirty
// and the retry tries again at its slow pace (every retryMax), filling in
// the record when it succeeds.
func (v *FS) report(log *slog.Logger, key string, c Conflict, err error) error {
	v.rp.smu.Lock()
	i, again := v.rp.stuck[key]
	switch {
	case again:
		v.rp.conflicts[i] = c
	default:
		v.rp.conflicts = append(v.rp.conflicts, c)
		i = len(v.rp.conflicts) - 1
	}
	if c.Kept == "" {
		if v.rp.stuck == nil {
			v.rp.stuck = make(map[string]int)
		}
		v.rp.stuck[key] = i
	} else {
		delete(v.rp.stuck, key)
	}
	v.rp.smu.Unlock()
	if c.Kept == "" {
		if !again {
			log.Warn("conflict: a file was "+c.Change+" at its share while this agent held unsent data for it, which cannot be kept beside it; kept in the cache and retried",
				"path", c.Path, "reason", c.Reason, "err", err)
		}
		return errConflict
	}
	msg := "conflict: a file was " + c.Change + " at its share while this agent held unsent data for it; the share's version stays, the local one is kept beside it"
	if c.Change == "deleted" {
		msg = "conflict: a file was deleted at its share while this agent held unsent data for it; the local version is kept where it was, under a new name"
	}
	if c.Partial {
		msg += ", but holds only the bytes written here (zeros elsewhere: the rest of the old version was no longer cached)"
	}
	log.Warn(msg, "path", c.Path, "kept", c.Kept)
	return errConflict
}

// unwarn forgets that key was reported waiting, and says whether it was.
func (v *FS) unwarn(key string) bool {
	v.rp.smu.Lock()
	defer v.rp.smu.Unlock()
	was := v.rp.warned[key]
	delete(v.rp.warned, key)
	return was
}

func (v *FS) warnOnce(key string) bool {
	v.rp.smu.Lock()
	defer v.rp.smu.Unlock()
	if v.rp.warned == nil {
		v.rp.warned = make(map[string]bool)
	}
	if v.rp.warned[key] {
		return false
	}
	v.rp.warned[key] = true
	return true
}

// unlinked drops the unsent data of a file removed through this agent by
// its last name, when no open file holds it: the user threw the data away,
// so there is no conflict to report.
func (v *FS) unlinked(ctx context.Context, p string, a wire.Attr) {
	if a.Mode&syscall.S_IFMT != syscall.S_IFREG || a.Nlink > 1 {
		return
	}
	key, err := v.Key(ctx, p, a)
	if err != nil || v.cache.Pinned(key) || v.sendingNow(key) || !v.cache.Unsent(key) {
		return
	}
	v.cache.Drop(key)
}
