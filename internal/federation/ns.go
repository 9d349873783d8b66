package federation

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/wire"
)

// Principal is the home namespace's principal.
func (r *Router) Principal() string { return r.home.NS.Principal() }

// MountTable returns the home table and, after it, the part of each
// linked domain in use: its entries below /<domain>, with its shares
// renamed share@domain. A linked domain's part waits at most TableBound;
// its last part serves while it does not answer (or sends a table that
// fails to read). Only when the home table fails and no linked part is
// held does it fail.
func (r *Router) MountTable(ctx context.Context) ([]wire.MountEntry, error) {
	home, err := r.home.NS.MountTable(ctx)
	_, made := r.linked()
	if len(made) == 0 {
		return home, err
	}
	if _, stale := r.lookup(""); stale {
		r.readLinksSoon()
	}
	wait := time.NewTimer(r.cfg.TableBound)
	defer wait.Stop()
	out := slices.Clone(home)
	for _, p := range made {
		out = append(out, p.mountTable(ctx, wait.C)...)
	}
	if err != nil && len(out) == 0 {
		return nil, err
	}
	return out, nil
}

// mountTable returns the domain's part of the mount table: read again
// (one read at a time, which goes on in the background when the caller
// stops waiting, at expiry or when ctx ends), or the last part read.
func (p *peer) mountTable(ctx context.Context, expiry <-chan time.Time) []wire.MountEntry {
	d, err := p.domain()
	if err != nil {
		return nil
	}
	p.mu.Lock()
	ch := p.reading
	if ch == nil {
		ch = make(chan struct{})
		p.reading = ch
		go p.readTable(d, ch)
	}
	p.mu.Unlock()
	select {
	case <-ch:
	case <-expiry:
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.table
}

// readTable reads the domain's mount table (bounded by Bound) and keeps
// its entries that lie below /<domain> and name valid shares; a failed
// read keeps the last part.
func (p *peer) readTable(d Domain, done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(context.Background(), p.r.cfg.Bound)
	t, err := d.NS.MountTable(ctx)
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reading = nil
	if err != nil {
		p.r.cfg.Log.Debug("a linked domain's mount table could not be read; the last one serves", "domain", p.name, "err", err)
		return
	}
	part := make([]wire.MountEntry, 0, len(t))
	for _, m := range t {
		if m.Prefix == "/"+p.name || !remote.Under(m.Prefix, "/"+p.name) || auth.ValidName(m.Share) != nil {
			continue
		}
		m.Share = p.share(m.Share)
		m.More = slices.Clone(m.More)
		for i := range m.More {
			if m.More[i].Kind != wire.LocDomain {
				m.More[i].Share = p.share(m.More[i].Share)
			}
		}
		part = append(part, m)
	}
	p.table = part
}

// Locate resolves gpath in its domain; a linked domain's share is named
// share@domain. A linked domain's location comes from its namespace
// within TableBound, or else (and while the domain is marked down) from
// its last part of the mount table, so that its cached files stay known.
func (r *Router) Locate(ctx context.Context, gpath string) (remote.Loc, error) {
	p, d, err := r.at(ctx, gpath)
	if err != nil {
		return remote.Loc{Global: clean(gpath)}, err
	}
	if p == nil {
		return d.NS.Locate(ctx, gpath)
	}
	if p.downErr() == nil {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.TableBound)
		loc, err := d.NS.Locate(cctx, gpath)
		timedOut := err != nil && ctx.Err() == nil && cctx.Err() != nil
		cancel()
		if !timedOut {
			if loc.Share != "" {
				loc.Share = p.share(loc.Share)
			}
			return loc, err
		}
	}
	p.mu.Lock()
	table := p.table
	p.mu.Unlock()
	if table == nil {
		return remote.Loc{Global: clean(gpath)}, p.setDown(fmt.Errorf("it sent no mount table within %v", r.cfg.TableBound))
	}
	return remote.Resolve(table, clean(gpath)), nil
}

// Stat returns the attributes of gpath from its domain.
func (r *Router) Stat(ctx context.Context, gpath string) (wire.Attr, error) {
	return call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) (wire.Attr, error) { return d.NS.Stat(ctx, gpath) })
}

// rootDir is the attributes of a linked domain's directory in the root.
var rootDir = wire.Attr{Mode: syscall.S_IFDIR | 0o555, Nlink: 2}

// withLinked adds a directory entry for each linked domain to the root's
// listing from home, sorted by name.
func (r *Router) withLinked(entries []wire.DirEntry) []wire.DirEntry {
	names, _ := r.linked()
	for _, n := range names {
		if !slices.ContainsFunc(entries, func(e wire.DirEntry) bool { return e.Name == n }) {
			entries = append(entries, wire.DirEntry{Name: n, Attr: rootDir})
		}
	}
	slices.SortFunc(entries, func(a, b wire.DirEntry) int { return strings.Compare(a.Name, b.Name) })
	return entries
}

// ReadDirData lists gpath in its domain; the root lists the home domain
// and every linked one.
func (r *Router) ReadDirData(ctx context.Context, gpath string, fileMax, budget uint32) ([]wire.DirEntry, wire.Attr, map[string][]byte, error) {
	type listing struct {
		entries []wire.DirEntry
		dir     wire.Attr
		data    map[string][]byte
	}
	l, err := call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) (listing, error) {
		e, a, data, err := d.NS.ReadDirData(ctx, gpath, fileMax, budget)
		return listing{e, a, data}, err
	})
	if err == nil && clean(gpath) == "/" {
		l.entries = r.withLinked(l.entries)
	}
	return l.entries, l.dir, l.data, err
}

// ReadDirPage lists a page of gpath in its domain; the root's pages hold
// the linked domains too.
func (r *Router) ReadDirPage(ctx context.Context, gpath, after string, max uint32) ([]wire.DirEntry, bool, error) {
	if clean(gpath) != "/" {
		type page struct {
			entries []wire.DirEntry
			more    bool
		}
		pg, err := call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) (page, error) {
			e, more, err := d.NS.ReadDirPage(ctx, gpath, after, max)
			return page{e, more}, err
		})
		return pg.entries, pg.more, err
	}
	entries, _, _, err := r.ReadDirData(ctx, gpath, 0, 0)
	if err != nil {
		return nil, false, err
	}
	i := 0
	for i < len(entries) && entries[i].Name <= after {
		i++
	}
	entries = entries[i:]
	if max > 0 && len(entries) > int(max) {
		return entries[:max], true, nil
	}
	return entries, false, nil
}

// Readlink reads the symlink gpath in its domain.
func (r *Router) Readlink(ctx context.Context, gpath string) (string, error) {
	return call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) (string, error) { return d.NS.Readlink(ctx, gpath) })
}

// StatFS returns the figures of gpath's file system in its domain.
func (r *Router) StatFS(ctx context.Context, gpath string) (wire.StatFSResp, error) {
	return call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) (wire.StatFSResp, error) { return d.NS.StatFS(ctx, gpath) })
}

// GetXattr reads an extended attribute in gpath's domain.
func (r *Router) GetXattr(ctx context.Context, gpath, name string) ([]byte, error) {
	return call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) ([]byte, error) { return d.NS.GetXattr(ctx, gpath, name) })
}

// ListXattr lists extended attributes in gpath's domain.
func (r *Router) ListXattr(ctx context.Context, gpath string) ([]string, error) {
	return call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) ([]string, error) { return d.NS.ListXattr(ctx, gpath) })
}

// Mkdir makes a directory in gpath's domain.
func (r *Router) Mkdir(ctx context.Context, gpath string, mode uint32) (wire.Attr, error) {
	return call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) (wire.Attr, error) { return d.NS.Mkdir(ctx, gpath, mode) })
}

// Mknod makes a special file in gpath's domain.
func (r *Router) Mknod(ctx context.Context, gpath string, mode, rdev uint32) (wire.Attr, error) {
	return call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) (wire.Attr, error) { return d.NS.Mknod(ctx, gpath, mode, rdev) })
}

// Symlink makes a symlink in gpath's domain (the target is stored as
// given: it may name any domain).
func (r *Router) Symlink(ctx context.Context, target, gpath string) (wire.Attr, error) {
	return call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) (wire.Attr, error) { return d.NS.Symlink(ctx, target, gpath) })
}

// Remove removes a file in gpath's domain.
func (r *Router) Remove(ctx context.Context, gpath string) error {
	_, err := call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) (struct{}, error) { return struct{}{}, d.NS.Remove(ctx, gpath) })
	return err
}

// Rmdir removes a directory in gpath's domain.
func (r *Router) Rmdir(ctx context.Context, gpath string) error {
	_, err := call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) (struct{}, error) { return struct{}{}, d.NS.Rmdir(ctx, gpath) })
	return err
}

// sameDomain fails with wire.CodeXDev when oldp and newp lie in different
// domains: a rename or a hard link stays within one.
func (r *Router) sameDomain(ctx context.Context, oldp, newp string) error {
	p1, _, err := r.at(ctx, oldp)
	if err != nil {
		return err
	}
	p2, _, err := r.at(ctx, newp)
	if err != nil {
		return err
	}
	if p1 != p2 {
		return wire.Errorf(wire.CodeXDev, "%s and %s are in different domains; a rename or hard link stays within one (copy, then remove)", clean(oldp), clean(newp))
	}
	return nil
}

// Link makes a hard link within one domain (wire.CodeXDev across two).
func (r *Router) Link(ctx context.Context, oldp, newp string) (wire.Attr, error) {
	if err := r.sameDomain(ctx, oldp, newp); err != nil {
		return wire.Attr{}, err
	}
	return call(r, ctx, oldp, 0, func(ctx context.Context, d Domain) (wire.Attr, error) { return d.NS.Link(ctx, oldp, newp) })
}

// Rename renames within one domain (wire.CodeXDev across two).
func (r *Router) Rename(ctx context.Context, oldp, newp string, noReplace bool) error {
	if err := r.sameDomain(ctx, oldp, newp); err != nil {
		return err
	}
	_, err := call(r, ctx, oldp, 0, func(ctx context.Context, d Domain) (struct{}, error) {
		return struct{}{}, d.NS.Rename(ctx, oldp, newp, noReplace)
	})
	return err
}

// SetAttrPrior changes attributes in gpath's domain.
func (r *Router) SetAttrPrior(ctx context.Context, gpath string, req wire.SetAttrReq) (wire.AttrResp, error) {
	return call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) (wire.AttrResp, error) { return d.NS.SetAttrPrior(ctx, gpath, req) })
}

// SetXattr sets an extended attribute in gpath's domain.
func (r *Router) SetXattr(ctx context.Context, gpath, name string, value []byte, flags uint32) (wire.Attr, error) {
	return call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) (wire.Attr, error) {
		return d.NS.SetXattr(ctx, gpath, name, value, flags)
	})
}

// RemoveXattr removes an extended attribute in gpath's domain.
func (r *Router) RemoveXattr(ctx context.Context, gpath, name string) (wire.Attr, error) {
	return call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) (wire.Attr, error) { return d.NS.RemoveXattr(ctx, gpath, name) })
}

// GetInvWait asks gpath's share, in its domain, for invalidations; a
// linked domain's bound is Bound on top of the wait.
func (r *Router) GetInvWait(ctx context.Context, gpath string, since uint64, max uint32, wait, lease time.Duration) (wire.GetInvResp, error) {
	return call(r, ctx, gpath, wait, func(ctx context.Context, d Domain) (wire.GetInvResp, error) {
		return d.NS.GetInvWait(ctx, gpath, since, max, wait, lease)
	})
}

// Validate asks gpath's share, in its domain, which listings are unchanged.
func (r *Router) Validate(ctx context.Context, gpath string, dirs []wire.DirCheck) (wire.ValidateResp, error) {
	return call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) (wire.ValidateResp, error) { return d.NS.Validate(ctx, gpath, dirs) })
}

// DelegReturn gives back a write delegation in gpath's domain.
func (r *Router) DelegReturn(ctx context.Context, gpath string, id uint64, pending []wire.ByteRange, done bool) error {
	_, err := call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) (struct{}, error) {
		return struct{}{}, d.NS.DelegReturn(ctx, gpath, id, pending, done)
	})
	return err
}

// DelegFail answers a recall in gpath's domain.
func (r *Router) DelegFail(ctx context.Context, gpath string, id uint64, code wire.Code, msg string) error {
	_, err := call(r, ctx, gpath, 0, func(ctx context.Context, d Domain) (struct{}, error) {
		return struct{}{}, d.NS.DelegFail(ctx, gpath, id, code, msg)
	})
	return err
}

// SetHealthHook has fn hear of the shares of every domain going down or
// coming back (a linked domain's shares named share@domain, all of them
// when the domain itself stops answering).
func (r *Router) SetHealthHook(fn func(remote.HealthEvent)) {
	r.mu.Lock()
	r.hook = fn
	r.mu.Unlock()
	r.home.NS.SetHealthHook(fn)
}

// Health returns the state of the shares of every domain talked to; while
// a linked domain is marked down, each share of its last table shows
// down.
func (r *Router) Health() []wire.ShareHealth {
	out := r.home.NS.Health()
	_, made := r.linked()
	for _, p := range made {
		d, err := p.domain()
		if err != nil {
			continue
		}
		hs := d.NS.Health()
		for i := range hs {
			hs[i].Share = p.share(hs[i].Share)
		}
		p.mu.Lock()
		if p.down != nil {
			for _, s := range p.sharesLocked() {
				i := slices.IndexFunc(hs, func(h wire.ShareHealth) bool { return h.Share == s })
				if i < 0 {
					hs = append(hs, wire.ShareHealth{Share: s})
					i = len(hs) - 1
				}
				hs[i].Up, hs[i].Since, hs[i].LastErr = false, p.downSince, p.down.Error()
			}
		}
		p.mu.Unlock()
		out = append(out, hs...)
	}
	return out
}

// DownErr returns the error of share (share@domain for a linked domain's)
// while it, or its domain, is marked down.
func (r *Router) DownErr(share string) error {
	base, dom, ok := strings.Cut(share, "@")
	if !ok {
		return r.home.NS.DownErr(share)
	}
	p, _ := r.lookup(dom)
	if p == nil || !p.made() {
		return nil
	}
	if err := p.downErr(); err != nil {
		return err
	}
	d, err := p.domain()
	if err != nil {
		return nil
	}
	return d.NS.DownErr(base)
}

// Reachable returns nil unless the share of gpath, or its linked domain,
// is marked down. It asks nobody (the links are not read again).
func (r *Router) Reachable(ctx context.Context, gpath string) error {
	name := first(clean(gpath))
	p, _ := r.lookup(name)
	if name == r.cfg.Home || p == nil || !p.made() {
		return r.home.NS.Reachable(ctx, gpath)
	}
	if err := p.downErr(); err != nil {
		return err
	}
	d, err := p.domain()
	if err != nil {
		return nil
	}
	return d.NS.Reachable(ctx, gpath)
}

// Open opens a file in gpath's domain.
func (r *Router) Open(ctx context.Context, gpath string, flags uint32) (remote.File, error) {
	return r.open(ctx, gpath, func(ctx context.Context, d Domain) (remote.File, error) { return d.Data.Open(ctx, gpath, flags) })
}

// OpenFirst opens a file in gpath's domain and reads its first n bytes.
func (r *Router) OpenFirst(ctx context.Context, gpath string, flags uint32, n int) (remote.File, error) {
	return r.open(ctx, gpath, func(ctx context.Context, d Domain) (remote.File, error) {
		return d.Data.OpenFirst(ctx, gpath, flags, n)
	})
}

// Create creates a file in gpath's domain.
func (r *Router) Create(ctx context.Context, gpath string, flags, mode uint32) (remote.File, error) {
	return r.open(ctx, gpath, func(ctx context.Context, d Domain) (remote.File, error) {
		return d.Data.Create(ctx, gpath, flags, mode)
	})
}

// open runs an open; a linked domain's file names its share share@domain.
func (r *Router) open(ctx context.Context, gpath string, fn func(context.Context, Domain) (remote.File, error)) (remote.File, error) {
	p, d, err := r.at(ctx, gpath)
	if err != nil || p == nil {
		if err != nil {
			return nil, err
		}
		return fn(ctx, d)
	}
	var f remote.File
	err = p.call(ctx, gpath, r.cfg.Bound, func(ctx context.Context) error {
		var err error
		f, err = fn(ctx, d)
		return err
	})
	if err != nil {
		return nil, err
	}
	return peerFile{f, p}, nil
}

// peerFile is a linked domain's file, whose location names its share
// share@domain.
type peerFile struct {
	remote.File
	p *peer
}

func (f peerFile) Loc() remote.Loc {
	loc := f.File.Loc()
	if loc.Share != "" {
		loc.Share = f.p.share(loc.Share)
	}
	return loc
}
