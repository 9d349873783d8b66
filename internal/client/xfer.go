package client

import (
	"context"
	"errors"
	"io"
	"pando.dev/pando/internal/remote"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"pando.dev/pando/internal/config"

	"pando.dev/pando/internal/wire"
)

// WriteBlock writes one block of at most wire.MaxData bytes at off. The
// share checks the data against sum, the CRC32C computed where the data was
// read, and writes nothing if they differ (wire.CodeCorrupt).
func (f *File) WriteBlock(ctx context.Context, p []byte, off int64, sum uint32) error {
	_, err := f.writeBlock(ctx, p, off, sum)
	return err
}

// writeBlock is WriteBlock; it also returns the attributes the share's
// reply carries (taken after this write).
func (f *File) writeBlock(ctx context.Context, p []byte, off int64, sum uint32) (wire.Attr, error) {
	var resp wire.WriteResp
	_, _, err := f.c.call(ctx, f.loc, wire.OpWrite, func(tok uint32) any {
		return wire.WriteReq{Tok: tok, Handle: f.handle, Offset: off, Sum: &sum}
	}, p, &resp, nil, nil, true)
	if err != nil {
		return wire.Attr{}, named(err, f.loc)
	}
	f.setAttr(resp.Attr)
	if int(resp.N) != len(p) {
		return wire.Attr{}, named(wire.Errorf(wire.CodeIO, "short write: %d of %d bytes at %d", resp.N, len(p), off), f.loc)
	}
	return resp.Attr, nil
}

// InFlight is how many bytes of bulk data to keep in flight to one share
// over streams data channels: 8 MiB per stream, at least 16 MiB (a
// 1 Gbit/s path at 130 ms round trip), at most 64 MiB.
func InFlight(streams int) int {
	return min(max(16<<20, 8<<20*streams), MaxInFlight)
}

// MaxInFlight bounds the bytes a bulk transfer keeps in flight to a share
// however long and fat the path.
const MaxInFlight = 64 << 20

// Extent is a byte range of a file.
type Extent = remote.Extent

// WriteExtents sends the bytes of exts, which read copies out of the
// caller's store (returning fewer bytes only at its end), in requests of
// Chunk bytes over the client's data channels, with InFlight bytes in
// flight, or on a path whose measured bandwidth-delay product asks for
// more (PathEstimate), up to MaxInFlight. Each request carries the CRC32C
// of its data, computed as soon as read returned it, and the share writes
// nothing that no longer matches. The extents must not overlap. WriteExtents stops at the first
// failure (nothing is sent after it; what was sent before may have been
// written) and returns that error; read's errors are returned unchanged.
//
// written, if not nil, is called after each request the share answered,
// one call at a time.
//
// On success it returns the file's attributes after the last write: of all
// the replies, the one with the highest version, then the largest size,
// which is the one the share made after every write had changed the file.
// The zero Attr (Ino 0) means no reply carried attributes.
func (f *File) WriteExtents(ctx context.Context, exts []Extent, read func(p []byte, off int64) (int, error), written func()) (wire.Attr, error) {
	chunk := min(max(f.Chunk, 4096), wire.MaxData)
	lo := max(InFlight(f.c.opts.Streams)/chunk, 1)
	hi := max(MaxInFlight/chunk, lo)
	if f.flags&wire.OpenAppend != 0 {
		lo, hi = 1, 1 // appends land in the order they are sent
	}
	free := make(chan []byte, hi)
	made := 0
	var (
		mu   sync.Mutex
		last wire.Attr
		est  remote.PathEstimate
	)
	g, gctx := errgroup.WithContext(ctx)
	var rerr error
send:
	for _, e := range exts {
		for off, end := e.Off, e.Off+e.Len; off < end; {
			var buf []byte
			if len(free) == 0 && made < est.Depth(int64(chunk), lo, hi) {
				buf = make([]byte, chunk)
				made++
			} else {
				select {
				case buf = <-free:
				case <-gctx.Done():
					break send
				}
			}
			k := min(int64(chunk), end-off)
			n, err := read(buf[:k], off)
			if err != nil && !errors.Is(err, io.EOF) {
				rerr = err
				break send
			}
			if n == 0 {
				free <- buf
				break // the caller's copy ends here
			}
			at, p := off, buf[:n]
			sum := wire.CRC(p)
			g.Go(func() error {
				defer func() { free <- buf }()
				t0, d0 := time.Now(), est.Delivered()
				a, err := f.writeBlock(gctx, p, at, sum)
				if err != nil {
					return err
				}
				est.Sample(time.Since(t0), d0, int64(len(p)))
				mu.Lock()
				defer mu.Unlock()
				if a.Version > last.Version || a.Version == last.Version && a.Size > last.Size {
					last = a
				}
				if written != nil {
					written()
				}
				return nil
			})
			off += k
		}
	}
	if err := g.Wait(); err != nil {
		return wire.Attr{}, err
	}
	if rerr != nil {
		return wire.Attr{}, rerr
	}
	if err := ctx.Err(); err != nil {
		return wire.Attr{}, err
	}
	return last, nil
}

// ReadBlock reads at most len(p) (<= wire.MaxData) bytes at off in one
// request; it returns fewer only at the end of the file.
func (f *File) ReadBlock(ctx context.Context, p []byte, off int64) (int, error) {
	n, _, err := f.ReadBlockSum(ctx, p, off)
	return n, err
}

// ReadBlockSum is ReadBlock that also returns the CRC32C of p[:n]: the sum
// the share computed from the bytes it read, which the data was checked
// against on arrival, so that a caller passing the block on (with its sum)
// need not compute it again.
func (f *File) ReadBlockSum(ctx context.Context, p []byte, off int64) (int, uint32, error) {
	n, sum, _, err := f.readChunk(ctx, p, off)
	return n, sum, err
}

// Sums returns the CRC32C of each block-sized block of [off, off+length),
// computed by the share from its storage (with uncached, from its disk
// rather than its page cache).
func (f *File) Sums(ctx context.Context, off, length int64, block int, uncached bool) ([]uint32, error) {
	var out []uint32
	for length > 0 {
		n := min(length, wire.MaxSumLength/int64(block)*int64(block))
		var resp wire.SumResp
		_, _, err := f.c.call(ctx, f.loc, wire.OpSum, func(tok uint32) any {
			return wire.SumReq{Tok: tok, Handle: f.handle, Offset: off, Length: n, Block: uint32(block), Uncached: uncached}
		}, nil, &resp, nil, nil, true)
		if err != nil {
			return nil, named(err, f.loc)
		}
		out = append(out, resp.Sums...)
		if int64(len(resp.Sums))*int64(block) < n {
			break // end of file
		}
		off, length = off+n, length-n
	}
	return out, nil
}

// GetFile reads a whole file of at most len(buf) bytes in one round trip.
// whole is false when the file is larger (data then holds its beginning).
func (c *Client) GetFile(ctx context.Context, gpath string, buf []byte) (data []byte, a wire.Attr, whole bool, err error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return nil, wire.Attr{}, false, err
	}
	var resp wire.GetFileResp
	data, _, err = c.call(ctx, loc, wire.OpGetFile, func(tok uint32) any {
		return wire.GetFileReq{Tok: tok, Path: loc.Rel, Max: uint32(min(len(buf), wire.MaxData))}
	}, nil, &resp, buf, nil, true)
	if err != nil {
		return nil, wire.Attr{}, false, named(err, loc)
	}
	return data, resp.Attr, resp.Whole, nil
}

// PutFile creates or replaces a whole file atomically in one round trip,
// checked against sum (the CRC32C of data at its source) and stamped with
// mtime (unix ns; 0 for now).
func (c *Client) PutFile(ctx context.Context, gpath string, data []byte, mode uint32, mtime int64, sum uint32) (wire.Attr, error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return wire.Attr{}, err
	}
	var resp wire.AttrResp
	_, _, err = c.call(ctx, loc, wire.OpPutFile, func(tok uint32) any {
		return wire.PutFileReq{Tok: tok, Path: loc.Rel, Mode: mode, Mtime: mtime, Sum: &sum}
	}, data, &resp, nil, nil, true)
	return resp.Attr, named(err, loc)
}

// ResolveFor asks the controller for a token for gpath's mount that share
// proxy may present on this client's behalf (a third-party transfer: the
// source share writes to the destination with the user's rights).
func (c *Client) ResolveFor(ctx context.Context, gpath, proxy string) (wire.ResolveResp, error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return wire.ResolveResp{}, err
	}
	return c.resolve(ctx, loc.Prefix, proxy)
}

// Protection is the data channel protection this client asks for.
func (c *Client) Protection() string {
	if c.opts.Protection == "" {
		return "private"
	}
	return c.opts.Protection
}

// NewDelegated makes a client that reaches only the share of t, with t's
// token (delegated to the identity of cfg): it never asks the controller,
// so it can act with no rights but the ones the token carries.
func NewDelegated(cfg *config.Config, t wire.ResolveResp, opts Options) (*Client, error) {
	opts.MountTTL = 100 * 365 * 24 * time.Hour
	opts.KeepFresh = false // its token is renewed by whoever delegated it
	c, err := New(cfg, opts)
	if err != nil {
		return nil, err
	}
	c.fixed = true
	c.mounts = []wire.MountEntry{{Prefix: t.Prefix, Share: t.Share, SharePath: t.SharePath}}
	c.mountsAt = time.Now()
	c.targets[t.Prefix] = &target{ResolveResp: t, fetched: time.Now()}
	return c, nil
}

// Push asks the share holding src to copy a range of it (or, with
// req.Whole, all of it) to the destination named in req: a third-party
// transfer, whose data never passes through this client. req.Tok and
// req.Path are filled in here.
func (c *Client) Push(ctx context.Context, src string, req wire.PushReq) ([]uint32, error) {
	loc, err := c.Locate(ctx, src)
	if err != nil {
		return nil, err
	}
	var resp wire.PushResp
	_, _, err = c.call(ctx, loc, wire.OpPush, func(tok uint32) any {
		r := req
		r.Tok, r.Path = tok, loc.Rel
		return r
	}, nil, &resp, nil, nil, false)
	return resp.Sums, named(err, loc)
}
