package client

import (
	"context"
	"fmt"

	"pando.dev/pando/internal/wire"
)

// Extended attributes of the user namespace (see wire.XattrTravels). None
// follows a final symlink. Directories of the namespace above the shares
// have none and take none.

// GetXattr returns the whole value of gpath's extended attribute name; an
// attribute that does not exist is a *wire.Error with wire.CodeNoData.
func (c *Client) GetXattr(ctx context.Context, gpath, name string) ([]byte, error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return nil, err
	}
	if syn, err := c.synthetic(ctx, loc); err != nil {
		return nil, err
	} else if syn {
		return nil, &wire.Error{Code: wire.CodeNoData, Message: fmt.Sprintf("%s has no extended attribute %s", loc.Global, name)}
	}
	var resp wire.XattrResp
	_, _, err = c.call(ctx, loc, wire.OpGetXattr, func(tok uint32) any { return wire.XattrReq{Tok: tok, Path: loc.Rel, Name: name} }, nil, &resp, nil, nil, false)
	return resp.Value, named(err, loc)
}

// ListXattr returns the names of gpath's extended attributes.
func (c *Client) ListXattr(ctx context.Context, gpath string) ([]string, error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return nil, err
	}
	if syn, err := c.synthetic(ctx, loc); syn || err != nil {
		return nil, err
	}
	var resp wire.ListXattrResp
	_, _, err = c.call(ctx, loc, wire.OpListXattr, func(tok uint32) any { return wire.PathReq{Tok: tok, Path: loc.Rel} }, nil, &resp, nil, nil, false)
	return resp.Names, named(err, loc)
}

// SetXattr sets gpath's extended attribute name to value; flags are
// wire.XattrCreate or wire.XattrReplace. It returns the file's attributes
// after the change.
func (c *Client) SetXattr(ctx context.Context, gpath, name string, value []byte, flags uint32) (wire.Attr, error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return wire.Attr{}, err
	}
	var resp wire.AttrResp
	_, _, err = c.call(ctx, loc, wire.OpSetXattr, func(tok uint32) any {
		return wire.SetXattrReq{Tok: tok, Path: loc.Rel, Name: name, Value: value, Flags: flags}
	}, nil, &resp, nil, nil, false)
	return resp.Attr, named(err, loc)
}

// RemoveXattr removes gpath's extended attribute name and returns the
// file's attributes after the change.
func (c *Client) RemoveXattr(ctx context.Context, gpath, name string) (wire.Attr, error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return wire.Attr{}, err
	}
	var resp wire.AttrResp
	_, _, err = c.call(ctx, loc, wire.OpRemoveXattr, func(tok uint32) any { return wire.XattrReq{Tok: tok, Path: loc.Rel, Name: name} }, nil, &resp, nil, nil, false)
	return resp.Attr, named(err, loc)
}
