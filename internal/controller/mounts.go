package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/store"
	"pando.dev/pando/internal/wire"
)

// The mount table: one record per prefix (pfxMount + prefix), a
// wire.MountEntry. Records written before entries had more than one
// location decode with MountEntry.More empty.

func (c *Controller) mountAdd(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var m wire.MountEntry
	if err := req.Decode(&m); err != nil {
		return rpc.Reply{}, err
	}
	if _, err := c.cleanGlobal(m.Prefix, true); err != nil {
		return rpc.Reply{}, err
	}
	if _, err := c.require(ctx, p, m.Prefix, auth.Admin); err != nil {
		return rpc.Reply{}, err
	}
	if err := c.checkLocations(ctx, &m); err != nil {
		return rpc.Reply{}, err
	}
	b, err := wire.Marshal(m)
	if err != nil {
		return rpc.Reply{}, err
	}
	if err := c.st.CompareAndSwap(ctx, pfxMount+m.Prefix, nil, b); errors.Is(err, store.ErrConflict) {
		return rpc.Reply{}, wire.Errorf(wire.CodeExist, "%s is already a mount; unmount it first", m.Prefix)
	} else if err != nil {
		return rpc.Reply{}, err
	}
	return rpc.Reply{}, nil
}

// checkLocations refuses an entry whose locations could not be served:
// more than wire.MountLocationsMax, a share named twice, a share not
// registered, a path that leaves its share, a second primary, or a kind
// the controller does not store (linked domains, unknown kinds). It trims
// the slashes off each share path, as they are stored.
func (c *Controller) checkLocations(ctx context.Context, m *wire.MountEntry) error {
	if n := 1 + len(m.More); n > wire.MountLocationsMax {
		return wire.Errorf(wire.CodeInvalid, "%s names %d locations; a mount may have at most %d", m.Prefix, n, wire.MountLocationsMax)
	}
	seen := make(map[string]bool, 1+len(m.More))
	check := func(what, share string, sharePath *string) error {
		*sharePath = strings.Trim(*sharePath, "/")
		if *sharePath != "" {
			if _, err := auth.CleanRel(*sharePath); err != nil {
				return wire.Errorf(wire.CodeInvalid, "%s: share path: %v", what, err)
			}
		}
		if seen[share] {
			return wire.Errorf(wire.CodeInvalid, "%s names share %q a second time; a share holds a mount's files at one place", what, share)
		}
		seen[share] = true
		if _, err := get[shareRec](ctx, c.st, pfxShare+share); err != nil {
			return wire.Errorf(wire.CodeNotRegistered, "share %q is not registered (see `pando share ls`)", share)
		}
		return nil
	}
	if err := check(m.Prefix, m.Share, &m.SharePath); err != nil {
		return err
	}
	for i := range m.More {
		l := &m.More[i]
		what := fmt.Sprintf("%s, location %d", m.Prefix, i+2)
		switch l.Kind {
		case wire.LocReplica:
		case wire.LocPrimary:
			return wire.Errorf(wire.CodeInvalid, "%s is a second primary; a mount has one primary (share %s), list other shares as replicas", what, m.Share)
		case wire.LocDomain:
			return wire.Errorf(wire.CodeInvalid, "%s names domain %q: a linked domain's namespace is reached at /%s/ (pando domain link), not through a mount entry", what, l.Share, l.Share)
		default:
			return wire.Errorf(wire.CodeInvalid, "%s has kind %d, which this controller does not know; name it a replica (kind %d)", what, l.Kind, wire.LocReplica)
		}
		if err := check(what, l.Share, &l.SharePath); err != nil {
			return err
		}
	}
	return nil
}

func (c *Controller) mountRemove(ctx context.Context, p *peer, req *rpc.Request) (rpc.Reply, error) {
	var r wire.PathReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if _, err := c.require(ctx, p, r.Path, auth.Admin); err != nil {
		return rpc.Reply{}, err
	}
	if err := c.st.Delete(ctx, pfxMount+r.Path); errors.Is(err, store.ErrNotFound) {
		return rpc.Reply{}, wire.Errorf(wire.CodeNotExist, "%s is not a mount (see `pando ns ls`)", r.Path)
	} else if err != nil {
		return rpc.Reply{}, err
	}
	return rpc.Reply{}, nil
}
