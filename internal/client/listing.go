package client

import (
	"context"
	"slices"
	"strings"

	"pando.dev/pando/internal/wire"
)

// checkListing refuses a listing that names anything but the distinct
// entries of one directory: a name that is empty, "." or "..", holds a
// slash or a NUL, or comes twice. Shares belong to other organisations;
// a name like "../x" would otherwise have the caches above take what the
// listing says of x for a file outside the directory listed, perhaps on
// another share.
func checkListing(entries []wire.DirEntry, loc Loc) error {
	seen := make(map[string]struct{}, len(entries))
	for _, e := range entries {
		if !validName(e.Name) {
			return wire.Errorf(wire.CodeIO, "share %s listed %s with the entry %q, which is not a file name; the listing is refused", loc.Share, loc.Global, e.Name)
		}
		if _, dup := seen[e.Name]; dup {
			return wire.Errorf(wire.CodeIO, "share %s listed %s with the entry %q twice; the listing is refused", loc.Share, loc.Global, e.Name)
		}
		seen[e.Name] = struct{}{}
	}
	return nil
}

// validName reports whether name is one component of a path.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= 255 && !strings.ContainsAny(name, "/\x00")
}

// ReadDirPage lists the entries of gpath whose names sort (bytewise) after
// after, at most max of them (0: the share's page size), with their
// attributes, and reports whether more follow. A directory above the
// shares, or one with mounts nested in it, comes whole in one page.
func (c *Client) ReadDirPage(ctx context.Context, gpath, after string, max uint32) ([]wire.DirEntry, bool, error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return nil, false, err
	}
	syn, err := c.synthetic(ctx, loc)
	if err != nil {
		return nil, false, err
	}
	kids, kerr := c.children(ctx, loc.Global)
	if syn || kerr == nil && len(kids) > 0 {
		entries, _, _, err := c.ReadDirData(ctx, gpath, 0, 0)
		if err != nil {
			return nil, false, err
		}
		i, _ := slices.BinarySearchFunc(entries, after, func(e wire.DirEntry, name string) int { return strings.Compare(e.Name, name) })
		for i < len(entries) && entries[i].Name <= after {
			i++
		}
		return entries[i:], false, nil
	}
	var page wire.ReadDirResp
	if _, _, err := c.call(ctx, loc, wire.OpReadDir, func(tok uint32) any {
		return wire.ReadDirReq{Tok: tok, Path: loc.Rel, After: after, Max: max}
	}, nil, &page, nil, nil, false); err != nil {
		return nil, false, named(err, loc)
	}
	if err := checkPage(page.Entries, after, loc); err != nil {
		return nil, false, err
	}
	for i := range page.Entries {
		page.Entries[i].Data = false // none was asked for
	}
	return page.Entries, page.More && len(page.Entries) > 0, nil
}

// checkPage refuses a page of a listing that checkListing refuses, or
// whose names are not in increasing order after after: a page is taken
// for the names in its range, so that one out of it could hide others.
func checkPage(entries []wire.DirEntry, after string, loc Loc) error {
	if err := checkListing(entries, loc); err != nil {
		return err
	}
	prev := after
	for _, e := range entries {
		if e.Name <= prev {
			return wire.Errorf(wire.CodeIO, "share %s listed %s with %q after %q, out of order; the listing is refused", loc.Share, loc.Global, e.Name, prev)
		}
		prev = e.Name
	}
	return nil
}
