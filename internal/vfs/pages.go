package vfs

import (
	"context"
	"path"
	"syscall"
	"time"

	"pando.dev/pando/internal/blockcache"
	"pando.dev/pando/internal/wire"
)

// Large directories. A directory that may hold more entries than a
// quarter of the bound on metadata (Options.MetaEntries; as its size
// says, pagedEntryBytes an entry) is listed a page at a time: the mount
// asks for each page as the kernel reads on (ReadDirPage), and the agent
// keeps the attributes of the entries it was given, within the bound, but
// never the whole listing. Its memory for a listing of 1,000,000 entries
// is then that of a page, not of the listing.
//
// A listing of more than listRevalidateMax entries is
// not fetched again whole to revalidate one entry's attributes: the page
// of the listing that starts at that entry is (listPage), which
// revalidates it and the revalidatePage-1 entries after it, those that
// ls -l, find or a READDIRPLUS ask for next (the listing's order). A walk
// through a directory that takes longer than its consistency window then
// costs one round trip per page of stale entries, not one per entry.
const revalidatePage = 1024

// pagedEntryBytes is the least size a directory gives an entry (tmpfs: 20
// bytes; ext4 with 40-byte names: 70).
const pagedEntryBytes = 20

// Paged reports whether p is to be listed a page at a time (ReadDirPage)
// rather than whole (ReadDir): when no fresh listing of it is cached and
// its size says it may hold more than a quarter of Options.MetaEntries.
func (v *FS) Paged(ctx context.Context, p string) bool {
	pol := v.opts.rule(p)
	v.mu.Lock()
	d, listed := v.dirs.get(p)
	v.mu.Unlock()
	if listed && v.freshFor(ctx, p, pol, d.at) {
		return false
	}
	a, err := v.GetAttr(ctx, p)
	return err == nil && a.Mode&syscall.S_IFMT == syscall.S_IFDIR && a.Size/pagedEntryBytes > int64(v.opts.MetaEntries/4)
}

// ReadDirPage lists the entries of p whose names sort after after (in the
// share's order, bytewise), one page of them, and reports whether more
// follow. Their attributes are cached as a whole listing's would be (not
// persisted: a run after this one lists such a directory again anyway).
func (v *FS) ReadDirPage(ctx context.Context, p, after string) ([]wire.DirEntry, bool, error) {
	if err := v.downErr(ctx, p); err != nil {
		return nil, false, err
	}
	g := v.generation()
	entries, more, err := v.c.ReadDirPage(ctx, p, after, 0)
	if err != nil {
		return nil, false, err
	}
	now := time.Now()
	v.mu.Lock()
	if v.gen == g {
		v.putEntries(p, entries, now)
	}
	v.mu.Unlock()
	return entries, more, nil
}

// listPage fetches the page of dir's listing from name on and caches its
// entries' attributes, unless an invalidation came meanwhile; it reports
// whether it did. The page is asked for after name less its last byte:
// the names between that and name, if any, come first.
func (v *FS) listPage(ctx context.Context, dir, name string) bool {
	if name == "" || name == "/" || name == "." {
		return false
	}
	g := v.generation()
	entries, _, err := v.c.ReadDirPage(ctx, dir, name[:len(name)-1], revalidatePage)
	if err != nil {
		return false
	}
	now := time.Now()
	v.mu.Lock()
	if v.gen != g {
		v.mu.Unlock()
		return false
	}
	v.putEntries(dir, entries, now)
	v.mu.Unlock()
	v.persistEntries(dir, entries)
	return true
}

// putEntries caches the attributes that a listing (or a page of it) of p
// fetched at now gave its entries. Called under v.mu, when nothing was
// invalidated since the listing was asked for.
func (v *FS) putEntries(p string, entries []wire.DirEntry, now time.Time) {
	for _, e := range entries {
		kid := path.Join(p, e.Name)
		if old, ok := v.attrs.get(kid); e.Attr.Ino == 0 || ok && !old.neg && old.a.Ino == e.Attr.Ino && old.a.Version > e.Attr.Version {
			continue // never back to an older version
		}
		v.attrs.put(kid, attrEntry{a: e.Attr, at: now})
		v.known.put(kid, v.attrs.peek(kid))
	}
}

// persistEntries records the attributes of p's entries for a later run.
func (v *FS) persistEntries(p string, entries []wire.DirEntry) {
	for _, e := range entries {
		if e.Attr.Ino != 0 {
			if b, err := wire.Marshal(e.Attr); err == nil {
				v.cache.PutMeta(blockcache.MetaAttr, path.Join(p, e.Name), b)
			}
		}
	}
}
