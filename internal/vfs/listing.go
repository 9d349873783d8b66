package vfs

import (
	"context"
	"path"
	"syscall"
	"time"

	"pando.dev/pando/internal/blockcache"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/wire"
)

// dirEntry is a directory listing cached in memory. Listings are also
// persisted, kept up to date by this agent's own creates, and answer
// lookups (missing names, siblings in small directories) without a round
// trip.
type dirEntry struct {
	entries []wire.DirEntry
	at      time.Time
	names   map[string]bool // the entries' names, made at the first lookup that needs them
	// used: the listing was given to a caller (not only fetched ahead):
	// once stale, it is worth fetching ahead again (see listAhead).
	used bool
}

// weight is what the listing counts for against Options.MetaEntries.
func (d dirEntry) weight() int { return 1 + len(d.entries) }

// has reports whether the listing names name.
func (d *dirEntry) has(name string) bool {
	if d.names == nil {
		d.names = make(map[string]bool, len(d.entries))
		for _, e := range d.entries {
			d.names[e.Name] = true
		}
	}
	return d.names[name]
}

// made records that this agent made p, whose attributes a came in reply to
// a change sent when the drop count was d: p's attributes are cached as
// setOwn does, and under window and poll, whose listings are trusted for a
// time whatever happens meanwhile, the cached listing of p's directory
// keeps its age and gains p instead of being dropped, so that the lookups
// that follow a create (make looking for its next object) still cost no
// round trip.
func (v *FS) made(p string, a wire.Attr, d uint64) {
	dir, name := path.Split(p)
	dir = path.Clean(dir)
	add := v.opts.rule(p).OnChange().AddToListing
	// All at once: a listing taken here and put back later could undo
	// another change's drop of it (a rename into the directory).
	v.mu.Lock()
	l, listed := v.dirs.get(dir)
	v.gen++
	v.attrs.del(p)
	v.dirs.del(p)
	v.dirs.del(dir)
	v.attrs.del(dir)
	own := v.drops == d
	if own {
		v.attrs.put(p, attrEntry{a: a, at: time.Now()})
		v.known.put(p, v.attrs.peek(p))
		if listed && add {
			entries := make([]wire.DirEntry, 0, len(l.entries)+1)
			for _, e := range l.entries {
				if e.Name != name {
					entries = append(entries, e)
				}
			}
			v.dirs.put(dir, dirEntry{entries: append(entries, wire.DirEntry{Name: name, Attr: a}), at: l.at})
		}
	}
	v.mu.Unlock()
	v.cache.PutMeta(blockcache.MetaDir, p, nil)
	v.cache.PutMeta(blockcache.MetaDir, dir, nil)
	v.cache.PutMeta(blockcache.MetaAttr, dir, nil)
	if own {
		v.persistAttr(p, a)
	} else {
		v.cache.PutMeta(blockcache.MetaAttr, p, nil)
	}
}

// listing is a directory listing as persisted: the entries and the
// directory's version they belong to.
type listing struct {
	Dir     wire.Attr       `cbor:"1,keyasint"`
	Entries []wire.DirEntry `cbor:"2,keyasint"`
}

func (v *FS) persistedListing(p string) (listing, bool) {
	b := v.cache.GetMeta(blockcache.MetaDir, p)
	var l listing
	if b == nil || wire.Unmarshal(b, &l) != nil {
		return l, false
	}
	return l, true
}

// unlisted reports whether a fresh listing of p's parent says that p does
// not exist: a lookup of a name that is not there (make looking for an
// object it has not built yet, a search path) then costs no round trip.
// The listing's freshness is judged under p's mode; what the listing says
// of names that are there went into the attribute cache with it.
func (v *FS) unlisted(ctx context.Context, p string, pol consistency.Rule) bool {
	if !pol.Caches() {
		return false
	}
	dir, name := path.Split(p)
	dir = path.Clean(dir)
	v.mu.Lock()
	d, ok := v.dirs.get(dir)
	v.mu.Unlock()
	if !ok || !v.freshFor(ctx, dir, pol, d.at) {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	d, ok = v.dirs.get(dir)
	if !ok {
		return false
	}
	has := d.has(name)
	v.dirs.put(dir, d)
	if !has {
		// As old as the listing: the kernel's copy of the answer ends
		// with the listing's window (KernelTimeout), not D after now.
		v.attrs.put(p, attrEntry{at: d.at, neg: true})
	}
	return !has
}

// listParentMax is the size of the largest directory (as stat gives it:
// about 100 entries a 4 KiB block) that listParent lists when its listing
// was never fetched.
const listParentMax = 32 << 10

// listRevalidateMax is the largest listing (in entries) that is fetched
// again to revalidate the attributes of one of its entries.
const listRevalidateMax = 4096

// listParent lists p's directory instead of asking for p's attributes
// alone: one request then makes every sibling fresh again (a walk, make
// stat'ing every header, a compiler searching its include path cost one
// round trip per directory, not per file). It reports whether the listing
// was fetched. The directory is listed when its listing was cached before
// (of any age, at most listRevalidateMax entries), in every mode but
// strict; or, under window and poll, when it is small and its listing was
// never fetched (under callback that listing would take a hold on a whole
// directory nobody listed).
func (v *FS) listParent(ctx context.Context, p string, pol consistency.Rule) bool {
	if !pol.Caches() {
		return false
	}
	dir := path.Dir(p)
	if dir == p || dir == "/" {
		return false
	}
	v.mu.Lock()
	l, listed := v.dirs.get(dir)
	d, ok := v.attrs.get(dir)
	v.mu.Unlock()
	switch {
	case listed && len(l.entries) <= listRevalidateMax:
	case listed:
		return v.listPage(ctx, dir, path.Base(p))
	case !pol.ListsParent():
		return false
	case !ok || d.neg || d.a.Mode&syscall.S_IFMT != syscall.S_IFDIR || d.a.Size > listParentMax:
		return false
	}
	_, err := v.readDir(ctx, dir, 0)
	return err == nil
}

// ReadDir lists p with attributes, from the listing cache while fresh.
// A listing fetched from the share has the listings of p's subdirectories
// fetched ahead (listAhead): a walk goes there next.
func (v *FS) ReadDir(ctx context.Context, p string) ([]wire.DirEntry, error) {
	return v.readDir(ctx, p, listAheadDepth)
}

// readDir is ReadDir, listing ahead depth levels of subdirectories.
func (v *FS) readDir(ctx context.Context, p string, depth int) ([]wire.DirEntry, error) {
	pol := v.opts.rule(p)
	v.mu.Lock()
	d, ok := v.dirs.get(p)
	v.mu.Unlock()
	if ok && v.freshFor(ctx, p, pol, d.at) {
		v.usedListing(p)
		// Listed ahead, its own subdirectories may not have been
		// (the queue was full, or it was the last level).
		v.listAhead(p, d.entries, depth)
		return d.entries, nil
	}
	if err := v.downErr(ctx, p); err != nil {
		return v.staleListing(p, d, ok, err)
	}
	if !pol.Revalidates() {
		// Never revalidated: what an earlier run listed is still true.
		if l, found := v.persistedListing(p); found {
			v.mu.Lock()
			v.dirs.put(p, dirEntry{entries: l.Entries, at: time.Now()})
			v.mu.Unlock()
			return l.Entries, nil
		}
	}
	// A stale listing is fetched again whole, with the attributes of its
	// entries: one request revalidates the directory and every entry in
	// it (asking only whether the directory changed would leave each
	// entry's attributes to be asked for on its own).
	entries, err := v.listShared(ctx, p, pol, time.Time{})
	if err != nil {
		if unreachable(err) {
			return v.staleListing(p, d, ok, err)
		}
		return nil, err
	}
	v.usedListing(p)
	v.listAhead(p, entries, depth)
	return entries, nil
}

// usedListing records that p's cached listing was given to a caller.
func (v *FS) usedListing(p string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if d, ok := v.dirs.get(p); ok && !d.used {
		d.used = true
		v.dirs.put(p, d)
	}
}

// fetchListing asks the share for the listing of p with its entries'
// attributes and caches both, unless an invalidation came meanwhile. fill,
// if not nil, puts the contents of small files the listing brought into
// the block cache (fillListed): the caller runs it once it has handed the
// listing on.
func (v *FS) fetchListing(ctx context.Context, p string, pol consistency.Rule) (_ []wire.DirEntry, fill func(), _ error) {
	g := v.generation()
	var fileMax, budget uint32
	if pol.FillsFromListing() {
		fileMax, budget = listDataFile, listDataBudget
	}
	entries, dirAttr, data, err := v.c.ReadDirData(ctx, p, fileMax, budget)
	if err != nil {
		return nil, nil, err
	}
	for i := range entries {
		entries[i].Data = false // said with the reply; not a property of the entry
	}
	now := time.Now()
	v.mu.Lock()
	if v.gen != g {
		v.mu.Unlock()
		return entries, nil, nil // changed while we listed: use it, keep nothing
	}
	v.mu.Unlock()
	// A listing heavier than the bound on metadata is neither kept nor
	// persisted (a directory Paged did not see as large; the lru would
	// keep it alone, past the bound).
	keep := dirEntry{entries: entries}.weight() <= v.opts.MetaEntries
	if dirAttr.Ino != 0 {
		if keep {
			if b, err := wire.Marshal(listing{Dir: dirAttr, Entries: entries}); err == nil {
				v.cache.PutMeta(blockcache.MetaDir, p, b)
			}
		}
		v.setFetched(p, dirAttr, g)
	}
	v.mu.Lock()
	if v.gen != g {
		v.mu.Unlock()
		return entries, nil, nil
	}
	if keep {
		v.dirs.put(p, dirEntry{entries: entries, at: now})
		v.knownDirs.put(p, v.dirs.peek(p))
	}
	v.putEntries(p, entries, now)
	v.mu.Unlock()
	if keep {
		v.persistEntries(p, entries)
	}
	if len(data) == 0 {
		return entries, nil, nil
	}
	return entries, func() { v.fillListed(ctx, p, entries, data, g) }, nil
}

// What a listing asks the share to bring of the small regular files in
// it, under poll and callback: the whole content of each of at most
// listDataFile bytes, listDataBudget bytes in all. Sources and headers
// mostly fit; 1 MiB adds 8 ms to the listing's reply at 1 Gbit/s (80 ms
// at 100 Mbit/s), against one round trip saved for every file read.
// Under poll and callback the bytes stay good until the share says the
// file changed, so they are read later with no round trip at all. Under
// window=D they would be served without asking only within D of the
// listing, and not asked for (an open of a file not cached brings its
// first bytes with it, see firstMax).
const (
	listDataFile   = 64 << 10
	listDataBudget = 1 << 20
)

// fillListed puts the contents a listing of p brought (by name) into the
// block cache under the versions the listing gave, so that reading those
// files costs no round trip while their attributes are trusted. Nothing
// is kept if an invalidation came after the listing was asked for
// (generation g).
func (v *FS) fillListed(ctx context.Context, p string, entries []wire.DirEntry, data map[string][]byte, g uint64) {
	if len(data) == 0 {
		return
	}
	for _, e := range entries {
		b := data[e.Name]
		if b == nil || int64(len(b)) != e.Attr.Size {
			continue
		}
		kid := path.Join(p, e.Name)
		key, err := v.Key(ctx, kid, e.Attr)
		if err != nil || v.generation() != g {
			return
		}
		if v.cache.Fill(key, e.Attr.Version, b, kid) {
			v.listFilled.Add(1)
		}
	}
}

// ListFilled counts the files cached from the contents listings brought.
func (v *FS) ListFilled() uint64 { return v.listFilled.Load() }

// ListingStamp reports when the listing of p the agent holds was fetched,
// if p's mode trusts it now: the edge lets the kernel keep its own copy of
// a listing (FUSE's readdir cache) for as long as the agent answers with
// the same one.
func (v *FS) ListingStamp(ctx context.Context, p string) (time.Time, bool) {
	pol := v.opts.rule(p)
	if !pol.Caches() {
		return time.Time{}, false
	}
	v.mu.Lock()
	d, ok := v.dirs.get(p)
	v.mu.Unlock()
	if !ok || !v.freshFor(ctx, p, pol, d.at) {
		return time.Time{}, false
	}
	return d.at, true
}
