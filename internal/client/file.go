package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"golang.org/x/sync/errgroup"

	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Defaults for bulk reads and writes: 1 MiB requests, 8 in flight, enough
// to fill a 1 Gbit/s path with 60 ms of round trip.
const (
	DefaultChunk  = 1 << 20
	DefaultWindow = 8
)

// File is an open file at a share. Its methods are safe for concurrent use.
type File struct {
	c      *Client
	loc    Loc
	conn   *rpc.Conn // the control channel holding the handle
	handle uint64
	flags  uint32

	mu      sync.Mutex
	attr    wire.Attr
	deleg   bool   // the share granted a write delegation with the open
	delegID uint64 // ... and named it so

	first    []byte // the file's first bytes, read with the open (OpenFirst)
	firstEOF bool   // they reach the end of the file

	// Chunk and Window size bulk transfers (requests of Chunk bytes,
	// Window of them in flight).
	Chunk, Window int
}

// Open opens an existing file (flags are wire.Open*).
func (c *Client) Open(ctx context.Context, gpath string, flags uint32) (*File, error) {
	return c.open(ctx, wire.OpOpen, gpath, flags, 0, 0)
}

// OpenFirst opens an existing file for reading and reads up to n bytes
// from its start in the same round trip (see File.First).
func (c *Client) OpenFirst(ctx context.Context, gpath string, flags uint32, n int) (*File, error) {
	return c.open(ctx, wire.OpOpen, gpath, flags, 0, n)
}

// Create creates (or, without wire.OpenExcl, opens) a file.
func (c *Client) Create(ctx context.Context, gpath string, flags, mode uint32) (*File, error) {
	return c.open(ctx, wire.OpCreate, gpath, flags, mode, 0)
}

func (c *Client) open(ctx context.Context, op wire.Op, gpath string, flags, mode uint32, first int) (*File, error) {
	loc, err := c.Locate(ctx, gpath)
	if err != nil {
		return nil, err
	}
	var resp wire.OpenResp
	var cr Creator
	if op == wire.OpCreate {
		cr = creatorOf(ctx)
	}
	data, conn, err := c.call(ctx, loc, op, func(tok uint32) any {
		return wire.OpenReq{Tok: tok, Path: loc.Rel, Flags: flags, Mode: mode, First: uint32(min(max(first, 0), wire.MaxData)),
			Owner: cr.Owner, Group: cr.Group}
	}, nil, &resp, nil, nil, false)
	if err != nil {
		return nil, named(err, loc)
	}
	if len(data) > first {
		data = nil // more than was asked for: not to be trusted
	}
	return &File{c: c, loc: loc, conn: conn, handle: resp.Handle, flags: flags, attr: resp.Attr, deleg: resp.Deleg, delegID: resp.DelegID,
		first: data, firstEOF: resp.EOF && data != nil,
		Chunk: DefaultChunk, Window: DefaultWindow}, nil
}

// First returns, once, the bytes read from the start of the file with an
// OpenFirst (nil if the share sent none) and whether they reach its end;
// the attributes the open returned are the file's as they were read.
func (f *File) First() (data []byte, eof bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, eof = f.first, f.firstEOF
	f.first, f.firstEOF = nil, false
	return data, eof
}

// Loc is where the file lives.
func (f *File) Loc() Loc { return f.loc }

// Deleg reports whether the share granted a write delegation when the
// file was opened (wire.OpenDeleg).
func (f *File) Deleg() bool { return f.deleg }

// DelegID names the write delegation granted (see wire.OpenResp.DelegID).
func (f *File) DelegID() uint64 { return f.delegID }

// Name is the file's global path.
func (f *File) Name() string { return f.loc.Global }

// Attr returns the attributes last seen (at open or after a write).
func (f *File) Attr() wire.Attr {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attr
}

func (f *File) setAttr(a wire.Attr) {
	f.mu.Lock()
	if a.Version >= f.attr.Version {
		f.attr = a
	}
	f.mu.Unlock()
}

// summedRead is a read reply that keeps the CRC32C its data carried.
type summedRead struct {
	wire.ReadResp
	sum uint32
}

func (r *summedRead) SetDataSum(sum uint32) { r.sum = sum }

// readChunk reads at most len(p) (<= wire.MaxData) bytes at off. It also
// returns the CRC32C of the bytes read: the one the share computed from
// what it read and the frame carried, checked on arrival.
func (f *File) readChunk(ctx context.Context, p []byte, off int64) (int, uint32, bool, error) {
	var resp summedRead
	data, _, err := f.c.call(ctx, f.loc, wire.OpRead, func(tok uint32) any {
		return wire.ReadReq{Tok: tok, Handle: f.handle, Offset: off, Length: uint32(len(p))}
	}, nil, &resp, p, nil, true)
	if err != nil {
		return 0, 0, false, named(err, f.loc)
	}
	if resp.Attr.Version != 0 {
		f.setAttr(resp.Attr)
	}
	if len(data) > len(p) {
		return 0, 0, false, named(wire.Errorf(wire.CodeIO, "the share sent %d bytes for a read of %d at %d", len(data), len(p), off), f.loc)
	}
	n := len(data)
	if n > 0 && &data[0] != &p[0] {
		n = copy(p, data)
	}
	return n, resp.sum, resp.EOF, nil
}

// sinkRead is a read reply whose data goes to a file as it arrives.
type sinkRead struct {
	summedRead
	w   io.WriterAt
	off int64
	n   int
}

func (r *sinkRead) WriteDataAt(p []byte, at int) error {
	if _, err := r.w.WriteAt(p, r.off+int64(at)); err != nil {
		return err
	}
	r.n = max(r.n, at+len(p))
	return nil
}

// ReadBlockTo reads at most n (<= wire.MaxData) bytes at off in one
// request and writes them to w at the same offset piece by piece as they
// arrive, while they are in cache, without gathering them in a buffer.
// It returns the bytes read (fewer only at the end of the file) and their
// CRC32C, which they were checked against once all had arrived. On an
// error, w may hold some or all of the bytes, checked or not: write the
// range again before trusting it.
func (f *File) ReadBlockTo(ctx context.Context, w io.WriterAt, off int64, n int) (int, uint32, error) {
	resp := sinkRead{w: w, off: off}
	_, _, err := f.c.call(ctx, f.loc, wire.OpRead, func(tok uint32) any {
		return wire.ReadReq{Tok: tok, Handle: f.handle, Offset: off, Length: uint32(n)}
	}, nil, &resp, nil, nil, true)
	if err != nil {
		return 0, 0, named(err, f.loc)
	}
	f.c.data.Add(int64(resp.n))
	if resp.Attr.Version != 0 {
		f.setAttr(resp.Attr)
	}
	if resp.n > n {
		return 0, 0, named(wire.Errorf(wire.CodeIO, "the share sent %d bytes for a read of %d at %d", resp.n, n, off), f.loc)
	}
	var err2 error
	if resp.n < n && (resp.EOF || resp.n == 0) {
		err2 = io.EOF
	}
	return resp.n, resp.sum, err2
}

// ReadAt reads len(p) bytes at off, with up to Window requests in flight.
// Like io.ReaderAt, it returns io.EOF when fewer bytes were read.
func (f *File) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	n, _, _, err := f.ReadAtSum(ctx, p, off)
	return n, err
}

// ReadAtSum is ReadAt that also returns the CRC32C of p[:n] when it read
// p in one request (summed): the sum the share computed, which the bytes
// were checked against on arrival.
func (f *File) ReadAtSum(ctx context.Context, p []byte, off int64) (n int, sum uint32, summed bool, err error) {
	chunk := max(f.Chunk, 4096)
	if len(p) <= chunk {
		n, sum, eof, err := f.readChunk(ctx, p, off)
		if err == nil && n < len(p) {
			if eof || n == 0 {
				err = io.EOF
			}
		}
		return n, sum, err == nil || err == io.EOF, err
	}
	type part struct {
		n   int
		err error
	}
	nparts := (len(p) + chunk - 1) / chunk
	parts := make([]part, nparts)
	var g errgroup.Group
	g.SetLimit(max(f.Window, 1))
	for i := 0; i < nparts; i++ {
		lo := i * chunk
		hi := min(lo+chunk, len(p))
		g.Go(func() error {
			n, _, _, err := f.readChunk(ctx, p[lo:hi], off+int64(lo))
			parts[i] = part{n, err}
			return nil
		})
	}
	g.Wait()
	total := 0
	for i, pt := range parts {
		total += pt.n
		if pt.err != nil {
			return total, 0, false, pt.err
		}
		if lo := i * chunk; pt.n < min(lo+chunk, len(p))-lo {
			return total, 0, false, io.EOF
		}
	}
	return total, 0, false, nil
}

// WriteAt writes p at off (or at the end, for files opened for append),
// with up to Window requests in flight, each checked by the share against
// the CRC32C of its data. Appends are sent one at a time.
func (f *File) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	chunk := min(max(f.Chunk, 4096), wire.MaxData)
	window := max(f.Window, 1)
	if f.flags&wire.OpenAppend != 0 {
		window = 1
	}
	var (
		mu    sync.Mutex
		total int
	)
	g, failed := errgroup.WithContext(ctx)
	g.SetLimit(window)
	for lo := 0; lo < len(p) || (lo == 0 && len(p) == 0); lo += chunk {
		if failed.Err() != nil {
			break
		}
		hi := min(lo+chunk, len(p))
		g.Go(func() error {
			if failed.Err() != nil {
				return nil // an earlier request failed: send nothing after it
			}
			// Each request carries its data's CRC32C, as write-back's
			// do: the share writes nothing that no longer matches.
			if _, err := f.writeBlock(ctx, p[lo:hi], off+int64(lo), wire.CRC(p[lo:hi])); err != nil {
				return err
			}
			mu.Lock()
			total += hi - lo
			mu.Unlock()
			return nil
		})
		if len(p) == 0 {
			break
		}
	}
	first := g.Wait()
	if first == nil && total < len(p) {
		first = fmt.Errorf("write %s: short write (%d of %d bytes)", f.loc.Global, total, len(p))
	}
	return total, first
}

// WriteTo streams the whole file from offset 0 to w, keeping Window reads
// in flight while w consumes.
func (f *File) WriteTo(ctx context.Context, w io.Writer) (int64, error) {
	return f.CopyRange(ctx, w, 0, -1)
}

// CopyRange streams length bytes from off to w (length < 0: to end of file).
func (f *File) CopyRange(ctx context.Context, w io.Writer, off, length int64) (int64, error) {
	chunk := max(f.Chunk, 4096)
	window := max(f.Window, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		buf []byte
		n   int
		eof bool
		err error
	}
	pending := make(chan chan result, window)
	free := make(chan []byte, window)
	for range window {
		free <- make([]byte, chunk)
	}
	go func() {
		defer close(pending)
		pos := off
		for length < 0 || pos < off+length {
			var buf []byte
			select {
			case buf = <-free:
			case <-ctx.Done():
				return
			}
			n := int64(chunk)
			if length >= 0 {
				n = min(n, off+length-pos)
			}
			ch := make(chan result, 1)
			at := pos
			go func() {
				got, _, eof, err := f.readChunk(ctx, buf[:n], at)
				ch <- result{buf, got, eof || int64(got) < n, err}
			}()
			select {
			case pending <- ch:
			case <-ctx.Done():
				return
			}
			pos += n
			if length < 0 && pos >= f.Attr().Size+int64(chunk)*int64(window) {
				// Far past the size seen at open: stop issuing; the
				// reads in flight tell whether the file grew.
				return
			}
		}
	}()
	var total int64
	for ch := range pending {
		r := <-ch
		if r.err != nil {
			return total, r.err
		}
		if r.n > 0 {
			if _, err := w.Write(r.buf[:r.n]); err != nil {
				return total, err
			}
			total += int64(r.n)
		}
		if r.eof {
			return total, nil
		}
		free <- r.buf
	}
	if err := ctx.Err(); err != nil {
		return total, err
	}
	return total, nil
}

// ReadFrom streams r into the file from offset 0 (append files: at the
// end), keeping Window writes in flight.
func (f *File) ReadFrom(ctx context.Context, r io.Reader) (int64, error) {
	chunk := min(max(f.Chunk, 4096), wire.MaxData)
	window := max(f.Window, 1)
	if f.flags&wire.OpenAppend != 0 {
		window = 1
	}
	free := make(chan []byte, window)
	for range window {
		free <- make([]byte, chunk)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		total int64
		off   int64
	)
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
	for failed() == nil {
		buf := <-free
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			at := off
			off += int64(n)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { free <- buf }()
				if _, err := f.WriteAt(ctx, buf[:n], at); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				mu.Lock()
				total += int64(n)
				mu.Unlock()
			}()
		} else {
			free <- buf
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) && !errors.Is(rerr, io.ErrUnexpectedEOF) {
				mu.Lock()
				if first == nil {
					first = rerr
				}
				mu.Unlock()
			}
			break
		}
	}
	wg.Wait()
	return total, failed()
}

// Truncate sets the file's size through the handle.
func (f *File) Truncate(ctx context.Context, size int64) error {
	var resp wire.AttrResp
	_, _, err := f.c.call(ctx, f.loc, wire.OpTruncate, func(tok uint32) any {
		return wire.TruncateReq{Tok: tok, Handle: f.handle, Size: size}
	}, nil, &resp, nil, f.conn, false)
	if err == nil {
		f.setAttr(resp.Attr)
	}
	return named(err, f.loc)
}

// Stat returns the open file's current attributes from the share (also
// after it was unlinked or renamed).
func (f *File) Stat(ctx context.Context) (wire.Attr, error) {
	var resp wire.AttrResp
	_, _, err := f.c.call(ctx, f.loc, wire.OpFGetAttr, func(tok uint32) any {
		return wire.HandleReq{Tok: tok, Handle: f.handle}
	}, nil, &resp, nil, f.conn, false)
	if err == nil {
		f.setAttr(resp.Attr)
	}
	return resp.Attr, named(err, f.loc)
}

// Sync asks the share to make the file's data durable.
func (f *File) Sync(ctx context.Context) error {
	_, _, err := f.c.call(ctx, f.loc, wire.OpFsync, func(tok uint32) any {
		return wire.HandleReq{Tok: tok, Handle: f.handle}
	}, nil, nil, nil, f.conn, false)
	return named(err, f.loc)
}

// Close releases the handle at the share.
func (f *File) Close(ctx context.Context) error {
	f.c.count(wire.OpClose)
	_, err := f.c.share(f.loc.Share).callOn(ctx, f.conn, wire.OpClose, wire.HandleReq{Handle: f.handle}, nil, nil, nil)
	if errors.Is(err, rpc.ErrBroken) {
		return nil // the share released the handle with the connection
	}
	return named(err, f.loc)
}
