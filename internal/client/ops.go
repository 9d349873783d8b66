package client

import (
	"context"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"pando.dev/pando/internal/wire"
)

// synthDir is the attributes shown for directories of the namespace that
// lie above every mount (such as "/uva").
var synthDir = wire.Attr{Mode: syscall.S_IFDIR | 0o555, Nlink: 2}

// children lists the names directly below a synthetic directory g.
func (c *Client) children(ctx context.Context, g string) ([]string, error) {
	mounts, err := c.MountTable(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	add := func(n string) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if g == "/" {
		add(c.cfg.Domain)
	}
	for _, m := range mounts {
		if m.Prefix != g && under(m.Prefix, g) {
			rest := strings.TrimPrefix(strings.TrimPrefix(m.Prefix, g), "/")
			add(strings.SplitN(rest, "/", 2)[0])
		}
	}
	slices.Sort(names)
	return names, nil
}

// synthetic reports whether g is a namespace directory above mounts.
func (c *Client) synthetic(ctx context.Context, loc Loc) (bool, error) {
	if loc.Share != "" {
		return false, nil
	}
	if loc.Global == "/" || loc.Global == "/"+c.cfg.Domain {
		return true, nil
	}
	kids, err := c.children(ctx, loc.Global)
	if err != nil {
		return false, err
	}
	if len(kids) == 0 {
		return false, &wire.Error{Code: wire.CodeNotExist, Message: fmt.Sprintf("%s: no share is mounted there (see `pando ns ls`)", loc.Global)}
	}
	return true, nil
}

func (c *Client) pathCall(ctx context.Context, op wire.Op, gpath string, resp any) (Loc, error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return loc, err
	}
	_, _, err = c.call(ctx, loc, op, func(tok uint32) any { return wire.PathReq{Tok: tok, Path: loc.Rel} }, nil, resp, nil, nil, false)
	return loc, named(err, loc)
}

// named shows the global path in a share's message instead of the
// share-relative one the share knows.
func named(err error, loc Loc) error {
	if err == nil {
		return nil
	}
	if we, ok := err.(*wire.Error); ok {
		cp := *we
		cp.Message = strings.Replace(cp.Message, " /"+loc.Rel+":", " "+loc.Global+":", 1)
		cp.Message = strings.Replace(cp.Message, "/"+loc.Rel+" is outside", loc.Global+" is outside", 1)
		if len(we.Paths) > 0 {
			cp.Message = globals(loc, we.Paths).Replace(cp.Message)
		}
		return &cp
	}
	return err
}

// globals shows the share-relative paths of a message (wire.Error.Paths)
// as global paths, those of the share's part that loc's prefix mounts.
func globals(loc Loc, paths []string) *strings.Replacer {
	tail := strings.TrimPrefix(strings.TrimPrefix(loc.Global, loc.Prefix), "/")
	base, ok := strings.CutSuffix(loc.Rel, tail)
	base = strings.TrimSuffix(base, "/")
	paths = slices.Clone(paths)
	// Longer paths first, so that one is not taken for the start of another.
	slices.SortFunc(paths, func(a, b string) int { return len(b) - len(a) })
	var pairs []string
	for _, p := range paths {
		rest, under := strings.CutPrefix(p, base)
		if p == "" || !ok || !under || (rest != "" && base != "" && rest[0] != '/') {
			continue
		}
		g := loc.Prefix
		if rest = strings.TrimPrefix(rest, "/"); rest != "" {
			g += "/" + rest
		}
		pairs = append(pairs, "/"+p, g)
	}
	return strings.NewReplacer(pairs...)
}

// Stat returns the attributes of gpath (not following a final symlink).
func (c *Client) Stat(ctx context.Context, gpath string) (wire.Attr, error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return wire.Attr{}, err
	}
	if syn, err := c.synthetic(ctx, loc); syn || err != nil {
		return synthDir, err
	}
	var resp wire.AttrResp
	_, _, err = c.call(ctx, loc, wire.OpGetAttr, func(tok uint32) any { return wire.PathReq{Tok: tok, Path: loc.Rel} }, nil, &resp, nil, nil, false)
	return resp.Attr, named(err, loc)
}

// ReadDir lists gpath with the attributes of every entry.
func (c *Client) ReadDir(ctx context.Context, gpath string) ([]wire.DirEntry, error) {
	entries, _, err := c.ReadDirAttr(ctx, gpath)
	return entries, err
}

// ReadDirAttr is ReadDir that also returns the directory's own attributes
// (zero for namespace directories above the shares).
func (c *Client) ReadDirAttr(ctx context.Context, gpath string) ([]wire.DirEntry, wire.Attr, error) {
	entries, dir, _, err := c.ReadDirData(ctx, gpath, 0, 0)
	return entries, dir, err
}

// ReadDirData is ReadDirAttr that also asks for the whole contents of the
// small regular files listed (at most fileMax bytes each, budget in all;
// 0: none), which it returns by name; each holds the bytes of the version
// its entry's attributes name. A share that sends none (one that does not
// know the request) is no error.
func (c *Client) ReadDirData(ctx context.Context, gpath string, fileMax, budget uint32) ([]wire.DirEntry, wire.Attr, map[string][]byte, error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return nil, wire.Attr{}, nil, err
	}
	if syn, err := c.synthetic(ctx, loc); err != nil {
		return nil, wire.Attr{}, nil, err
	} else if syn {
		kids, err := c.children(ctx, loc.Global)
		if err != nil {
			return nil, wire.Attr{}, nil, err
		}
		out := make([]wire.DirEntry, len(kids))
		for i, k := range kids {
			out[i] = wire.DirEntry{Name: k, Attr: synthDir}
		}
		return out, wire.Attr{}, nil, nil
	}
	// The listing comes in pages, each asked for after the last name of
	// the one before (wire.ReadDirReq.After).
	var resp wire.ReadDirResp
	var data map[string][]byte
	for after := ""; ; {
		var page wire.ReadDirResp
		raw, _, err := c.call(ctx, loc, wire.OpReadDir, func(tok uint32) any {
			return wire.ReadDirReq{Tok: tok, Path: loc.Rel, DataMax: fileMax, DataBudget: budget, After: after}
		}, nil, &page, nil, nil, false)
		if err != nil {
			return nil, wire.Attr{}, nil, named(err, loc)
		}
		for name, b := range splitListData(page.Entries, raw, fileMax) {
			if data == nil {
				data = make(map[string][]byte)
			}
			data[name] = b
		}
		resp.Entries = append(resp.Entries, page.Entries...)
		resp.Dir = page.Dir
		if !page.More || len(page.Entries) == 0 || page.Entries[len(page.Entries)-1].Name <= after {
			break
		}
		after = page.Entries[len(page.Entries)-1].Name
	}
	if err := checkListing(resp.Entries, loc); err != nil {
		return nil, wire.Attr{}, nil, err
	}
	// Mounts nested below this directory show as directories too.
	kids, err := c.children(ctx, loc.Global)
	if err == nil {
		for _, k := range kids {
			if !slices.ContainsFunc(resp.Entries, func(e wire.DirEntry) bool { return e.Name == k }) {
				resp.Entries = append(resp.Entries, wire.DirEntry{Name: k, Attr: synthDir})
			}
		}
	}
	slices.SortFunc(resp.Entries, func(a, b wire.DirEntry) int { return strings.Compare(a.Name, b.Name) })
	return resp.Entries, resp.Dir, data, nil
}

// splitListData cuts a listing's data part into the contents of the
// entries marked Data, in their order. Contents that were not asked for,
// or that do not add up to the data part, are not trusted: none is
// returned, and no entry keeps its mark.
func splitListData(entries []wire.DirEntry, raw []byte, fileMax uint32) map[string][]byte {
	var total int64
	ok := fileMax > 0
	for _, e := range entries {
		if e.Data {
			if e.Attr.Size <= 0 || e.Attr.Size > int64(fileMax) {
				ok = false
			}
			total += e.Attr.Size
		}
	}
	if !ok || total != int64(len(raw)) {
		for i := range entries {
			entries[i].Data = false
		}
		return nil
	}
	var data map[string][]byte
	off := int64(0)
	for _, e := range entries {
		if e.Data {
			if data == nil {
				data = make(map[string][]byte)
			}
			data[e.Name] = raw[off : off+e.Attr.Size : off+e.Attr.Size]
			off += e.Attr.Size
		}
	}
	return data
}

// Readlink returns the target of a symlink.
func (c *Client) Readlink(ctx context.Context, gpath string) (string, error) {
	var resp wire.ReadlinkResp
	_, err := c.pathCall(ctx, wire.OpReadlink, gpath, &resp)
	return resp.Target, err
}

// Remove unlinks a file (not a directory).
func (c *Client) Remove(ctx context.Context, gpath string) error {
	_, err := c.pathCall(ctx, wire.OpUnlink, gpath, nil)
	return err
}

// Rmdir removes an empty directory.
func (c *Client) Rmdir(ctx context.Context, gpath string) error {
	_, err := c.pathCall(ctx, wire.OpRmdir, gpath, nil)
	return err
}

// StatFS describes the file system behind gpath.
func (c *Client) StatFS(ctx context.Context, gpath string) (wire.StatFSResp, error) {
	var resp wire.StatFSResp
	_, err := c.pathCall(ctx, wire.OpStatFS, gpath, &resp)
	return resp, err
}

// Mkdir creates a directory.
func (c *Client) Mkdir(ctx context.Context, gpath string, mode uint32) (wire.Attr, error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return wire.Attr{}, err
	}
	var resp wire.AttrResp
	cr := creatorOf(ctx)
	_, _, err = c.call(ctx, loc, wire.OpMkdir, func(tok uint32) any {
		return wire.MkdirReq{Tok: tok, Path: loc.Rel, Mode: mode, Owner: cr.Owner, Group: cr.Group}
	}, nil, &resp, nil, nil, false)
	return resp.Attr, named(err, loc)
}

// Mknod creates gpath as a FIFO, a socket, a device (a record at the
// share) or an empty regular file (see wire.MknodReq).
func (c *Client) Mknod(ctx context.Context, gpath string, mode, rdev uint32) (wire.Attr, error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return wire.Attr{}, err
	}
	var resp wire.AttrResp
	cr := creatorOf(ctx)
	_, _, err = c.call(ctx, loc, wire.OpMknod, func(tok uint32) any {
		return wire.MknodReq{Tok: tok, Path: loc.Rel, Mode: mode, Rdev: rdev, Owner: cr.Owner, Group: cr.Group}
	}, nil, &resp, nil, nil, false)
	return resp.Attr, named(err, loc)
}

// Symlink creates gpath pointing at target.
func (c *Client) Symlink(ctx context.Context, target, gpath string) (wire.Attr, error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return wire.Attr{}, err
	}
	var resp wire.AttrResp
	cr := creatorOf(ctx)
	_, _, err = c.call(ctx, loc, wire.OpSymlink, func(tok uint32) any {
		return wire.SymlinkReq{Tok: tok, Path: loc.Rel, Target: target, Owner: cr.Owner, Group: cr.Group}
	}, nil, &resp, nil, nil, false)
	return resp.Attr, named(err, loc)
}

// SetAttr changes mode, times or size (see wire.SetAttrReq; Tok and Path are filled in).
func (c *Client) SetAttr(ctx context.Context, gpath string, r wire.SetAttrReq) (wire.Attr, error) {
	resp, err := c.SetAttrPrior(ctx, gpath, r)
	return resp.Attr, err
}

// SetAttrPrior is SetAttr, with the version the file had just before the
// change when its contents did not change (see wire.AttrResp.Prior).
func (c *Client) SetAttrPrior(ctx context.Context, gpath string, r wire.SetAttrReq) (wire.AttrResp, error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return wire.AttrResp{}, err
	}
	var resp wire.AttrResp
	_, _, err = c.call(ctx, loc, wire.OpSetAttr, func(tok uint32) any { r.Tok, r.Path = tok, loc.Rel; return r }, nil, &resp, nil, nil, false)
	return resp, named(err, loc)
}

// Truncate sets a file's size.
func (c *Client) Truncate(ctx context.Context, gpath string, size int64) (wire.Attr, error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return wire.Attr{}, err
	}
	var resp wire.AttrResp
	_, _, err = c.call(ctx, loc, wire.OpTruncate, func(tok uint32) any { return wire.TruncateReq{Tok: tok, Path: loc.Rel, Size: size} }, nil, &resp, nil, nil, false)
	return resp.Attr, named(err, loc)
}

// twoPaths resolves two global paths that must lie in one mount.
func (c *Client) twoPaths(ctx context.Context, op wire.Op, oldp, newp string) (Loc, Loc, error) {
	a, err := c.Locate(ctx, oldp)
	if err != nil {
		return a, a, err
	}
	b, err := c.Locate(ctx, newp)
	if err != nil {
		return a, b, err
	}
	if a.Prefix != b.Prefix || a.Share == "" {
		return a, b, &wire.Error{Code: wire.CodeXDev, Message: fmt.Sprintf("%s %s -> %s: both paths must lie in the same mount (%s and %s differ); copy instead", op, a.Global, b.Global, orRoot(a.Prefix), orRoot(b.Prefix))}
	}
	return a, b, nil
}

func orRoot(p string) string {
	if p == "" {
		return "the namespace root"
	}
	return p
}

// Rename moves oldp to newp within one mount.
func (c *Client) Rename(ctx context.Context, oldp, newp string, noReplace bool) error {
	a, b, err := c.twoPaths(ctx, wire.OpRename, oldp, newp)
	if err != nil {
		return err
	}
	_, _, err = c.call(ctx, a, wire.OpRename, func(tok uint32) any {
		return wire.RenameReq{Tok: tok, Old: a.Rel, New: b.Rel, NoReplace: noReplace}
	}, nil, nil, nil, nil, false)
	return named(err, a)
}

// Link makes newp a hard link to oldp within one mount.
func (c *Client) Link(ctx context.Context, oldp, newp string) (wire.Attr, error) {
	a, b, err := c.twoPaths(ctx, wire.OpLink, oldp, newp)
	if err != nil {
		return wire.Attr{}, err
	}
	var resp wire.AttrResp
	_, _, err = c.call(ctx, a, wire.OpLink, func(tok uint32) any { return wire.RenameReq{Tok: tok, Old: a.Rel, New: b.Rel} }, nil, &resp, nil, nil, false)
	return resp.Attr, named(err, b)
}

// Join joins a global directory and a name.
func Join(dir, name string) string { return path.Join(dir, name) }

// GetInv polls the invalidations of this client's session at the share
// behind the global path gpath (any path of a mount of that share).
func (c *Client) GetInv(ctx context.Context, gpath string, since uint64, max uint32) (wire.GetInvResp, error) {
	return c.GetInvWait(ctx, gpath, since, max, 0, 0)
}

// GetInvWait is GetInv for a callback session: the share holds the
// request up to wait when there is nothing to report, and the request
// acknowledges every record up to since; lease is how long the agent
// trusts its cache after sending a request that then succeeded.
func (c *Client) GetInvWait(ctx context.Context, gpath string, since uint64, max uint32, wait, lease time.Duration) (wire.GetInvResp, error) {
	var resp wire.GetInvResp
	if c.opts.Session == "" {
		return resp, fmt.Errorf("invalidation polling needs a client session")
	}
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return resp, err
	}
	_, _, err = c.call(ctx, loc, wire.OpGetInv, func(tok uint32) any {
		return wire.GetInvReq{Tok: tok, Session: c.opts.Session, Since: since, Max: max, Wait: int64(wait), Lease: int64(lease)}
	}, nil, &resp, nil, nil, false)
	return resp, err
}

// DelegReturn gives back the write delegation id on the file at gpath
// that the share recalled: first with the ranges still to be written
// (pending), then with done once everything is at the share. A share that
// holds another delegation of the file for this session by now (id is an
// earlier one's) ignores it.
func (c *Client) DelegReturn(ctx context.Context, gpath string, id uint64, pending []wire.ByteRange, done bool) error {
	if c.opts.Session == "" {
		return fmt.Errorf("returning a delegation needs a client session")
	}
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return err
	}
	_, _, err = c.call(ctx, loc, wire.OpDelegReturn, func(tok uint32) any {
		return wire.DelegReturnReq{Tok: tok, Session: c.opts.Session, Path: loc.Rel, Pending: pending, Done: done, ID: id}
	}, nil, nil, nil, nil, false)
	return named(err, loc)
}

// DelegFail answers the share's recall of the write delegation on the file
// at gpath with why its data cannot be written back now (code and msg, see
// wire.DelegReturnReq): the share keeps the delegation and tells the
// requests waiting for it.
func (c *Client) DelegFail(ctx context.Context, gpath string, id uint64, code wire.Code, msg string) error {
	if c.opts.Session == "" {
		return fmt.Errorf("returning a delegation needs a client session")
	}
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return err
	}
	if len(msg) > wire.MaxReturnMessage {
		msg = strings.ToValidUTF8(msg[:wire.MaxReturnMessage], "")
	}
	_, _, err = c.call(ctx, loc, wire.OpDelegReturn, func(tok uint32) any {
		// The whole file pending: a share that does not know Code takes
		// it for a first return step, and still holds every reader back.
		return wire.DelegReturnReq{Tok: tok, Session: c.opts.Session, Path: loc.Rel, Code: code, Message: msg, ID: id,
			Pending: []wire.ByteRange{{Off: 0, Len: math.MaxInt64}}}
	}, nil, nil, nil, nil, false)
	return named(err, loc)
}

// Validate asks the share behind the global path gpath which of the
// listings dirs (share-relative paths with the sums of the listings held,
// at most wire.ValidateMax) are unchanged; see wire.ValidateReq.
func (c *Client) Validate(ctx context.Context, gpath string, dirs []wire.DirCheck) (wire.ValidateResp, error) {
	var resp wire.ValidateResp
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return resp, err
	}
	_, _, err = c.call(ctx, loc, wire.OpValidate, func(tok uint32) any {
		return wire.ValidateReq{Tok: tok, Dirs: dirs}
	}, nil, &resp, nil, nil, false)
	return resp, named(err, loc)
}
