package vfs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/wire"
)

// Disconnected reads. While a share is unreachable (the client marked it
// down: it failed to answer a ping, or refused connections), cached
// attributes, listings and file blocks of its paths are served read-only
// from the cache, however old, in every mode but strict, unless the
// mount was told --offline=fail. What is not cached, and every change,
// fails at once with the client's UnreachableError (EHOSTUNREACH at the
// mount), but for writes kept back under a write delegation, which stay
// in the cache and are sent when the share returns.

// Offline says what a mount does with cached data while its share
// cannot be reached.
type Offline int

// Offline modes.
const (
	OfflineServe Offline = iota // serve cached data read-only, marked stale
	OfflineFail                 // fail as for uncached data
)

func (o Offline) String() string {
	if o == OfflineFail {
		return "fail"
	}
	return "serve"
}

// ParseOffline parses "serve" or "fail".
func ParseOffline(s string) (Offline, error) {
	switch s {
	case "serve":
		return OfflineServe, nil
	case "fail":
		return OfflineFail, nil
	}
	return 0, fmt.Errorf("unknown offline mode %q; use serve (cached files stay readable while their share is unreachable) or fail", s)
}

// StaleXattr is the extended attribute that, while a path's share is
// unreachable and its cached copy is served, holds the copy's age: the
// seconds since the share last confirmed it. It is absent otherwise.
const StaleXattr = "user.pando.stale"

// unreachable reports whether err says a share could not be reached.
func unreachable(err error) bool { return errors.Is(err, remote.ErrUnreachable) }

// ErrUnreachable is what an error wraps when a share could not be reached
// (for an edge above the vfs to tell it).
var ErrUnreachable = remote.ErrUnreachable

// servesStale reports whether p's cached copy is served while its share
// is unreachable.
func (v *FS) servesStale(p string) bool {
	return v.opts.Offline == OfflineServe && v.opts.rule(p).Caches()
}

// downErr returns the error of p's share while it is marked down (nil
// while it is up, or for paths above the shares). It dials nothing (see
// client.Reachable).
func (v *FS) downErr(ctx context.Context, p string) error {
	return v.c.Reachable(ctx, p)
}

// isDown reports whether p's share is marked down now; it asks nobody.
func (v *FS) isDown(ctx context.Context, p string) bool {
	loc, err := v.c.Locate(ctx, p)
	return err == nil && loc.Share != "" && v.c.DownErr(loc.Share) != nil
}

// staleAttr answers a stat of p whose share could not be reached (err):
// from the attribute cache (e, if ok), or what an earlier run persisted.
func (v *FS) staleAttr(p string, e attrEntry, ok bool, err error) (wire.Attr, error) {
	if !v.servesStale(p) {
		return wire.Attr{}, err
	}
	if !ok {
		v.mu.Lock()
		e, ok = v.known.get(p)
		v.mu.Unlock()
	}
	if ok {
		if e.neg {
			return wire.Attr{}, syscall.ENOENT
		}
		return v.localAttr(p, e.a), nil
	}
	if a, found := v.persistedAttr(p); found {
		return v.localAttr(p, a), nil
	}
	return wire.Attr{}, err
}

// staleListing answers a listing of p whose share could not be reached
// (err): the listing in memory (d, if ok), or the persisted one.
func (v *FS) staleListing(p string, d dirEntry, ok bool, err error) ([]wire.DirEntry, error) {
	if !v.servesStale(p) {
		return nil, err
	}
	if !ok {
		v.mu.Lock()
		d, ok = v.knownDirs.get(p)
		v.mu.Unlock()
	}
	if ok {
		return d.entries, nil
	}
	if l, found := v.persistedListing(p); found {
		return l.Entries, nil
	}
	return nil, err
}

// validated is when the share last confirmed what is cached of p: when
// its attributes were fetched, or (under poll and callback) the last poll
// since that named no change. What an earlier run persisted counts as
// confirmed when this run started (at the latest).
func (v *FS) validated(ctx context.Context, p string) time.Time {
	v.mu.Lock()
	e, ok := v.attrs.get(p)
	if !ok {
		e, ok = v.known.get(p)
	}
	v.mu.Unlock()
	at := v.started
	if ok {
		at = e.at
	}
	if pol := v.opts.rule(p); ok && pol.PollEvery() > 0 {
		if loc, err := v.c.Locate(ctx, p); err == nil {
			v.mu.Lock()
			pl := v.pollers[loc.Share]
			v.mu.Unlock()
			if pl != nil {
				at = pol.Validated(at, pl.vouch())
			}
		}
	}
	return at
}

// staleValue is the value of StaleXattr for p, and whether it has one:
// only while its share is unreachable and its cached copy is served.
func (v *FS) staleValue(ctx context.Context, p string) ([]byte, bool) {
	if !v.isDown(ctx, p) || !v.servesStale(p) {
		return nil, false
	}
	age := time.Since(v.validated(ctx, p))
	return []byte(strconv.FormatInt(int64(age/time.Second), 10)), true
}

// checkWritable fails an open for writing of p while its share is
// unreachable, unless the data written stays in the cache under a write
// delegation held for the file (key).
func (v *FS) checkWritable(ctx context.Context, p, key string) error {
	err := v.downErr(ctx, p)
	if err == nil {
		return nil
	}
	if v.backFor(p) && v.delegFor(p, key) != nil {
		return nil
	}
	return err
}

// ShareState is a share's reachability as `pando stats` shows it.
type ShareState struct {
	wire.ShareHealth
	// Serving says what the mount does with cached data while the share
	// is down: "stale" (served read-only) or "fail".
	Serving string `json:"serving,omitempty"`
}

// Shares returns the reachability of every share the mount has used.
func (v *FS) Shares() []ShareState {
	hs := v.c.Health()
	out := make([]ShareState, 0, len(hs))
	for _, h := range hs {
		s := ShareState{ShareHealth: h}
		if !h.Up {
			s.Serving = "fail"
			if v.opts.Offline == OfflineServe {
				s.Serving = "stale"
			}
		}
		out = append(out, s)
	}
	return out
}

// logHealth writes the one line of a share's outage and the one of its
// end.
func (v *FS) logHealth(ev remote.HealthEvent) {
	if ev.Up {
		v.log.Warn("share reachable again; cached data is revalidated as usual", "share", ev.Share,
			"down_for", time.Since(ev.Since).Round(time.Millisecond).String())
		// Data that waited for it goes now, not at the retry's next round.
		select {
		case v.rp.kickChan() <- struct{}{}:
		default:
		}
		return
	}
	what := "cached files and listings are served read-only, as last validated (user.pando.stale gives their age; strict paths fail)"
	if v.opts.Offline == OfflineFail {
		what = "operations on its paths fail (--offline=fail)"
	}
	v.log.Warn("share unreachable; "+what, "share", ev.Share, "cause", ev.Err)
}

// gone drops what is known of p and below after this agent removed or
// renamed it.
func (v *FS) gone(p string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.known.drop(func(k string, _ attrEntry) bool { return k == p || strings.HasPrefix(k, p+"/") })
	v.knownDirs.drop(func(k string, _ dirEntry) bool { return k == p || strings.HasPrefix(k, p+"/") })
}

// MaxUnsent is the bound on data not yet sent that writes may add while
// their share cannot be reached (see Options.MaxUnsent).
func (v *FS) MaxUnsent() int64 {
	limit := v.cache.DirtyLimit()
	if v.opts.MaxUnsent > 0 {
		return min(v.opts.MaxUnsent, limit)
	}
	return limit / 2
}

// boundUnsent refuses a write of n bytes at off through h while h's share
// cannot be reached if the blocks it would make dirty take the cache's
// unsent data past MaxUnsent: the data kept back while a share is away
// does not fill the cache (other shares' files, and reads, keep room).
func (v *FS) boundUnsent(ctx context.Context, h *Handle, off, n int64) error {
	have, limit := v.cache.DirtyBytes(), v.MaxUnsent()
	if have+n+2*v.cache.BlockSize() <= limit {
		return nil // within the bound however many blocks it touches
	}
	add := v.cache.AddsDirty(h.key, off, n)
	if add == 0 || have+add <= limit {
		return nil
	}
	down := v.downErr(ctx, h.path)
	if down == nil {
		return nil
	}
	return fmt.Errorf("%s: the write is refused: its share cannot be reached, and the cache already holds %d bytes not yet sent, the most it accepts while a share is away (--max-unsent %d); it is sent when the share returns: %w",
		h.path, have, limit, down)
}

// heldWhileDown returns the write delegation on p (cache key key) that
// this agent holds while p's share cannot be reached, whose lease has
// lapsed meanwhile: a close keeps its data back all the same, durable in
// the cache, and the delegation's timer (or its reclaim, if the share
// restarted) sends it when the share returns; the share revokes it only
// for another agent that wants the file, and then the local version is
// kept beside the file as a conflict.
func (v *FS) heldWhileDown(ctx context.Context, p, key string) *wdeleg {
	v.mu.Lock()
	d := v.wdelegs[p]
	v.mu.Unlock()
	if d == nil || d.key != key || v.downErr(ctx, p) == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.returning {
		return nil
	}
	return d
}
