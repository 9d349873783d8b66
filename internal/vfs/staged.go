package vfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"pando.dev/pando/internal/blockcache"
	"pando.dev/pando/internal/fault"
	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/wire"
)

// Named stages. Data sent ahead of a close (ahead.go) goes to a stage at
// the share named by this agent (wire.HandleReq.Name) and recorded in the
// cache's index with the ranges staged (blockcache.StageOf), and the close's
// write-back sends the rest to the same stage and commits it: the share's
// file is the old version until then, never a mix. The stage outlives the
// agent's connection and a restart: each send attaches it anew, and the
// commit after a restart (the replay of unsent data) finds the ranges it
// holds. If the share no longer holds all that was staged (it restarted,
// or the stage expired: docs/consistency.md), the staged ranges are sent
// again from the cache; if the cache evicted some of them, the write is
// lost: the stage is thrown away, the file stays the share's version, and
// the data is dropped as if refused (errStageLost).
//
// A write-back of more than inlineMax goes through the file's named stage
// too (made for it if there is none), in batches recorded in the index as
// the share takes them (blockcache.MarkSent): a write-back cut short by a
// restart sends only what the stage lacks.

// errStageLost says that data sent ahead is neither at the share nor in
// the cache any more.
var errStageLost = errors.New("the data sent ahead of the close is gone from the share's stage (the share restarted, or the stage expired) and from the cache: the write is lost, and the file is the share's version")

// dropped reports whether err means that the data was dropped for good:
// refused by the share, or lost with its stage.
func dropped(err error) bool { return wire.Permanent(err) || errors.Is(err, errStageLost) }

// newStageName names a stage of this agent's.
func newStageName() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "ahead-" + hex.EncodeToString(b[:])
}

// stageAhead sends the dirty ranges rs of h's file to its named stage,
// made and recorded first if it has none, and marks them staged.
func (v *FS) stageAhead(ctx context.Context, h *Handle, rs []blockcache.Range) error {
	key, p := h.key, h.path
	h.waitOpen(ctx)
	name, staged := v.cache.StageOf(key)
	if name == "" {
		name = newStageName()
		v.cache.SetStage(key, name)
	}
	defer v.beginSend(key)() // persists the index: the name first
	f, err := h.remoteFile(ctx, true)
	if err != nil {
		return v.stageFailed(ctx, key, p, &h.attr, fmt.Errorf("sending %s ahead to its share: %w", p, err))
	}
	st, again, err := v.attachStage(ctx, key, p, f, name, staged)
	if err != nil {
		return v.stageFailed(ctx, key, p, &h.attr, err)
	}
	send := unionRanges(rs, again)
	if _, err := st.WriteExtents(ctx, extentsOf(send), v.cacheReader(ctx, key, p, h.fetch), func() { v.sent(key) }); err != nil {
		_ = st.Detach(context.WithoutCancel(ctx))
		return v.stageFailed(ctx, key, p, &h.attr, fmt.Errorf("sending %s ahead to its share: %w", p, err))
	}
	if err := st.Detach(ctx); err != nil {
		return fmt.Errorf("sending %s ahead to its share: %w", p, err)
	}
	fault.Crash("vfs.ahead.before-markstaged")
	v.cache.MarkStaged(key, name, send)
	// Recorded before the blocks are evicted: a restarted agent must not
	// take them for dirty blocks it holds.
	if err := v.cache.PersistIndex(); err != nil {
		v.log.Warn("cannot record in the cache that data was sent ahead", "path", p, "err", err)
	}
	return nil
}

// stageFailed drops the data of key for good if err says so (as a
// refused write-back does), and returns err.
func (v *FS) stageFailed(ctx context.Context, key, p string, base *wire.Attr, err error) error {
	if dropped(err) {
		b := *base
		v.refuse(ctx, key, p, &b, err)
	}
	return err
}

// attachStage attaches the named stage name of key's file f, and returns
// it with the staged ranges it no longer holds, which the caller sends
// again (the cache holds them). If the cache does not, the stage is
// thrown away and errStageLost returned. A stage that holds what the
// cache does not know of (the agent stopped between a send and its
// record) keeps it: those ranges are still dirty here, and sent again.
func (v *FS) attachStage(ctx context.Context, key, p string, f remote.File, name string, staged []blockcache.Range) (remote.Stage, []blockcache.Range, error) {
	st, err := f.StageNamed(ctx, name)
	if err != nil {
		return nil, nil, fmt.Errorf("writing %s to its stage at the share: %w", p, err)
	}
	var missing []blockcache.Range
	for _, r := range staged {
		missing = append(missing, notIn(r, st.Held())...)
	}
	if len(missing) == 0 {
		return st, nil, nil
	}
	if v.cache.HoldsRanges(key, missing) {
		v.log.Info("the share's stage lacks data sent ahead; sending it again from the cache", "path", p, "stage", name)
		return st, missing, nil
	}
	_ = st.Close(context.WithoutCancel(ctx))
	return nil, nil, fmt.Errorf("writing %s back to its share: %w", p, errStageLost)
}

// commitStaged is commitRanges through the file's named stage, made and
// recorded first if it has none: ranges (less what the stage holds of
// them already, unchanged since: a write-back cut short resumes; plus
// what the stage lost, see attachStage) go to the stage in batches, each
// recorded in the index once the share has it (blockcache.MarkSent), and the
// stage is then committed. If anything fails, the stage stays at the
// share, unless it holds nothing sent ahead and the share is full (its
// room is given back; the data is still dirty here) or the data is
// dropped.
func (v *FS) commitStaged(ctx context.Context, key, p string, f remote.File, ranges []blockcache.Range, c remote.Commit, fetch blockcache.Fetcher, written func()) (a wire.Attr, err error) {
	info := v.cache.Stage(key)
	fresh := info.Name == ""
	if fresh {
		info.Name = newStageName()
		v.cache.SetStage(key, info.Name)
		if err := v.cache.PersistIndex(); err != nil {
			v.log.Warn("cannot record a write-back's stage in the cache", "path", p, "err", err)
		}
	}
	st, again, err := v.attachStage(ctx, key, p, f, info.Name, info.Staged)
	if err != nil {
		if errors.Is(err, errStageLost) {
			v.cache.EndStage(key)
		}
		if code := wire.CodeOf(err); fresh && (code == wire.CodeAgain || code == wire.CodeQuota) {
			// The share keeps no more stages of this principal now:
			// a stage of this write-back's own does (not resumed).
			v.cache.EndStage(key)
			return v.commitUnnamed(ctx, key, p, f, ranges, c, fetch, written)
		}
		return wire.Attr{}, err
	}
	committed := false
	defer func() {
		if committed {
			return
		}
		bg := context.WithoutCancel(ctx)
		if dropped(err) || wire.CodeOf(err) == wire.CodeNoSpace && len(info.Staged) == 0 {
			_ = st.Close(bg)
			v.cache.EndStage(key)
			return
		}
		_ = st.Detach(bg)
	}()
	var held []blockcache.Range
	for _, h := range st.Held() {
		held = append(held, blockcache.Range{Off: h.Off, Len: h.Len})
	}
	var have []blockcache.Range // of ranges, in the stage unchanged
	for _, r := range info.Sent {
		have = append(have, clipTo(r, held)...)
	}
	var send []blockcache.Range
	for _, r := range ranges {
		send = append(send, minus(r, have)...)
	}
	send = unionRanges(send, again)
	if n := total(have); n > 0 {
		v.log.Info("resuming a write-back: the share's stage holds part of it", "path", p, "bytes", n, "to send", total(send))
	}
	const batch = 16 << 20
	read := v.cacheReader(ctx, key, p, fetch)
	for len(send) > 0 {
		part, rest := cutRanges(send, batch)
		if _, err := st.WriteExtents(ctx, extentsOf(part), read, written); err != nil {
			return wire.Attr{}, fmt.Errorf("writing %s back to its share: %w", p, err)
		}
		v.cache.MarkSent(key, info.Name, part)
		send = rest
		if len(rest) > 0 {
			if err := v.cache.PersistIndex(); err != nil {
				v.log.Warn("cannot record a write-back's progress in the cache", "path", p, "err", err)
			}
			fault.Crash("vfs.staged.after-batch")
		}
	}
	if info.Stale {
		// The file was cut since the stage began: what the stage holds
		// beyond the cut and nothing sent covers is zeros now.
		cover := unionRanges(unionRanges(ranges, info.Staged), again)
		var zeros []blockcache.Range
		for _, h := range held {
			for _, r := range clipTo(h, []blockcache.Range{{Off: info.StaleFrom, Len: max(c.Size-info.StaleFrom, 0)}}) {
				zeros = append(zeros, minus(r, cover)...)
			}
		}
		if len(zeros) > 0 {
			if _, err := st.WriteExtents(ctx, extentsOf(zeros), func(b []byte, _ int64) (int, error) {
				clear(b)
				return len(b), nil
			}, nil); err != nil {
				return wire.Attr{}, fmt.Errorf("writing %s back to its share: %w", p, err)
			}
		}
	}
	fault.Crash("vfs.staged.before-commit")
	a, err = st.Commit(ctx, c)
	if err != nil {
		return wire.Attr{}, fmt.Errorf("writing %s back to its share: %w", p, err)
	}
	committed = true
	v.cache.EndStage(key)
	return a, nil
}

// commitUnnamed is commitStaged through a stage of its own, which the
// share throws away if the write-back does not commit it.
func (v *FS) commitUnnamed(ctx context.Context, key, p string, f remote.File, ranges []blockcache.Range, c remote.Commit, fetch blockcache.Fetcher, written func()) (wire.Attr, error) {
	st, err := f.Stage(ctx)
	if err != nil {
		return wire.Attr{}, fmt.Errorf("writing %s back to its share: %w", p, err)
	}
	defer st.Close(context.WithoutCancel(ctx))
	if _, err := st.WriteExtents(ctx, extentsOf(ranges), v.cacheReader(ctx, key, p, fetch), written); err != nil {
		return wire.Attr{}, fmt.Errorf("writing %s back to its share: %w", p, err)
	}
	a, err := st.Commit(ctx, c)
	if err != nil {
		return wire.Attr{}, fmt.Errorf("writing %s back to its share: %w", p, err)
	}
	return a, nil
}

// minus returns the parts of r that none of the sorted, disjoint rs covers.
func minus(r blockcache.Range, rs []blockcache.Range) []blockcache.Range {
	held := make([]wire.ByteRange, len(rs))
	for i, x := range rs {
		held[i] = wire.ByteRange{Off: x.Off, Len: x.Len}
	}
	return notIn(r, held)
}

// total is the bytes of rs.
func total(rs []blockcache.Range) int64 {
	var n int64
	for _, r := range rs {
		n += r.Len
	}
	return n
}

// cutRanges splits the sorted rs into the first n bytes and the rest.
func cutRanges(rs []blockcache.Range, n int64) (head, rest []blockcache.Range) {
	for i, r := range rs {
		if r.Len <= n {
			head = append(head, r)
			n -= r.Len
			continue
		}
		if n > 0 {
			head = append(head, blockcache.Range{Off: r.Off, Len: n})
			r = blockcache.Range{Off: r.Off + n, Len: r.Len - n}
		}
		return head, append([]blockcache.Range{r}, rs[i+1:]...)
	}
	return head, nil
}

// cacheReader reads key's bytes from the cache, for WriteExtents.
func (v *FS) cacheReader(ctx context.Context, key, p string, fetch blockcache.Fetcher) func(b []byte, off int64) (int, error) {
	return func(b []byte, off int64) (int, error) {
		n, err := v.cache.ReadAt(ctx, key, b, off, fetch)
		if err != nil && !errors.Is(err, io.EOF) {
			return n, fmt.Errorf("reading %s from the cache: %w", p, err)
		}
		return n, err
	}
}

// readStaged lays over p (n bytes read at off from the share's file f,
// whose old version they are) the bytes of key's file that are in its
// named stage: a block sent ahead and then evicted is read back so. It
// returns the bytes of p now valid.
func (v *FS) readStaged(ctx context.Context, key string, f remote.File, p []byte, off int64, n int) (int, error) {
	name, staged := v.cache.StageOf(key)
	parts := clipAll(staged, blockcache.Range{Off: off, Len: int64(len(p))})
	if name == "" || len(parts) == 0 {
		return n, nil
	}
	st, err := f.StageNamed(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("reading data sent ahead from the share's stage: %w", err)
	}
	defer st.Detach(context.WithoutCancel(ctx))
	for _, r := range parts {
		b := p[r.Off-off : r.End()-off]
		m, err := st.ReadAt(ctx, b, r.Off)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("reading data sent ahead from the share's stage: %w", err)
		}
		if int64(m) < r.Len {
			return 0, fmt.Errorf("reading data sent ahead from the share's stage: %w", errStageLost)
		}
		if end := int(r.End() - off); end > n {
			clear(p[n : r.Off-off]) // a hole between the old end and the staged bytes
			n = end
		}
	}
	return n, nil
}

// clipAll returns the parts of the ranges rs that lie in w.
func clipAll(rs []blockcache.Range, w blockcache.Range) []blockcache.Range {
	var out []blockcache.Range
	for _, r := range rs {
		out = append(out, clipTo(r, []blockcache.Range{w})...)
	}
	return out
}

// extentsOf turns cache ranges into the client's extents (none empty).
func extentsOf(rs []blockcache.Range) []remote.Extent {
	var exts []remote.Extent
	for _, r := range rs {
		if r.Len > 0 {
			exts = append(exts, remote.Extent{Off: r.Off, Len: r.Len})
		}
	}
	return exts
}

// notIn returns the parts of r that none of the sorted, disjoint held
// ranges covers.
func notIn(r blockcache.Range, held []wire.ByteRange) []blockcache.Range {
	var out []blockcache.Range
	at := r.Off
	for _, h := range held {
		if h.Off+h.Len <= at {
			continue
		}
		if h.Off >= r.End() {
			break
		}
		if h.Off > at {
			out = append(out, blockcache.Range{Off: at, Len: h.Off - at})
		}
		at = h.Off + h.Len
		if at >= r.End() {
			return out
		}
	}
	if at < r.End() {
		out = append(out, blockcache.Range{Off: at, Len: r.End() - at})
	}
	return out
}

// unionRanges merges two lists of ranges into one sorted, disjoint list.
func unionRanges(a, b []blockcache.Range) []blockcache.Range {
	all := append(append([]blockcache.Range(nil), a...), b...)
	if len(all) == 0 {
		return nil
	}
	for i := 1; i < len(all); i++ {
		for j := i; j > 0 && all[j].Off < all[j-1].Off; j-- {
			all[j], all[j-1] = all[j-1], all[j]
		}
	}
	out := []blockcache.Range{all[0]}
	for _, r := range all[1:] {
		last := &out[len(out)-1]
		if r.Off <= last.End() {
			last.Len = max(last.End(), r.End()) - last.Off
			continue
		}
		out = append(out, r)
	}
	return out
}
