package rpc

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"pando.dev/pando/internal/relay"
	"pando.dev/pando/internal/wire"
)

// DefaultTimeout bounds a call whose context has no deadline.
const DefaultTimeout = 60 * time.Second

// ErrBroken is returned (wrapped) by calls on a connection that failed or closed.
var ErrBroken = errors.New("connection lost")

// Conn is the client end of one connection. It is safe for concurrent use.
type Conn struct {
	nc   net.Conn
	addr string

	wmu sync.Mutex // serialises frames on the wire

	mu      sync.Mutex
	nextID  uint32
	pending map[uint32]*call
	err     error // set once the connection is broken
	done    chan struct{}

	onNotify func(op wire.Op, id uint32, meta []byte)

	// lastRecv is when bytes last arrived (unix ns): a watchdog tells a
	// connection that is slow from one that went silent.
	lastRecv atomic.Int64
}

// LastRecv is when the connection last received bytes (when it was set
// up, before any).
func (c *Conn) LastRecv() time.Time { return time.Unix(0, c.lastRecv.Load()) }

// stamper records when reads return bytes.
type stamper struct{ c *Conn }

func (s stamper) Read(p []byte) (int, error) {
	n, err := s.c.nc.Read(p)
	if n > 0 {
		s.c.lastRecv.Store(time.Now().UnixNano())
	}
	return n, err
}

type call struct {
	op      wire.Op
	buf     []byte // where reply data goes, if large enough
	done    chan struct{}
	typ     byte
	meta    []byte
	data    []byte
	err     error
	sum     uint32 // the CRC32C the reply's data carried and matched
	summed  bool
	stream  chan []byte // notifications for watches
	claimed bool        // the reader is filling this call
	sink    DataSink    // takes the reply's data as it arrives, if set
}

// DataSummer is a reply message that wants the CRC32C its frame's data
// carried, once the data was checked against it: a receiver that keeps
// the data keeps its checksum without computing it again.
type DataSummer interface {
	SetDataSum(sum uint32)
}

// DataSink is a reply message that takes its frame's data piece by piece
// as it arrives, straight from the connection's read buffer, instead of
// having it gathered in a buffer: a receiver that stores the data (a file
// being copied) writes each piece while it is still in the CPU's cache,
// and the bytes are copied once, not twice. WriteDataAt gets the piece at
// offset at of the data part; p is valid only during the call. The data
// is checked against the frame's CRC32C only once it has all arrived: a
// sink must not trust what it stored until the call succeeds. When
// WriteDataAt fails, the rest of the data is read and dropped, and the
// call fails with that error. Pieces end on 4 KiB boundaries of the data,
// but for the last.
type DataSink interface {
	WriteDataAt(p []byte, at int) error
}

// Dial connects to addr, performs the TLS handshake and exchanges prefaces.
func Dial(ctx context.Context, addr string, conf *tls.Config, channel byte) (*Conn, error) {
	ctx, cancel := dialContext(ctx)
	defer cancel()
	raw, err := dialTCP(ctx, addr)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(raw, conf)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, &HandshakeError{Addr: addr, Err: err}
	}
	return newConn(ctx, tc, addr, channel)
}

// dialContext bounds a connection set-up that has no deadline yet.
func dialContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, 15*time.Second)
}

// dialTCP connects to addr with keep-alives and without Nagle's delay;
// an address relay://HOST:PORT/NAME is reached through that relay.
func dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	if relay.IsAddr(addr) {
		return relay.Dial(ctx, addr)
	}
	return relay.DialTCP(ctx, addr)
}

// HandshakeError reports a failed TLS handshake; callers explain it.
type HandshakeError struct {
	Addr string
	Err  error
}

func (e *HandshakeError) Error() string {
	return fmt.Sprintf("TLS handshake with %s: %v", e.Addr, e.Err)
}
func (e *HandshakeError) Unwrap() error { return e.Err }

// NewConn runs the protocol over an established connection (used by tests
// and by in-process pipes).
func NewConn(ctx context.Context, nc net.Conn, channel byte) (*Conn, error) {
	return newConn(ctx, nc, nc.RemoteAddr().String(), channel)
}

func newConn(ctx context.Context, nc net.Conn, addr string, channel byte) (*Conn, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	if _, err := nc.Write(wire.EncodePreface(wire.Preface{Version: wire.Version, Channel: channel})); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	if _, err := wire.ReadPreface(nc); err != nil {
		nc.Close()
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			// A TLS peer that refused our certificate closes here.
			return nil, &HandshakeError{Addr: addr, Err: err}
		}
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	_ = nc.SetDeadline(time.Time{})
	c := &Conn{nc: nc, addr: addr, pending: make(map[uint32]*call), done: make(chan struct{})}
	c.lastRecv.Store(time.Now().UnixNano())
	go c.readLoop()
	return c, nil
}

// Addr is the address this connection was dialled to.
func (c *Conn) Addr() string { return c.addr }

// Done is closed when the connection breaks or is closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection broke, or nil while it works.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// ConnectionState returns the TLS state, if the connection is TLS.
func (c *Conn) ConnectionState() (tls.ConnectionState, bool) {
	if tc, ok := c.nc.(*tls.Conn); ok {
		return tc.ConnectionState(), true
	}
	return tls.ConnectionState{}, false
}

// Close ends the connection; pending calls fail with ErrBroken.
func (c *Conn) Close() error {
	c.fail(fmt.Errorf("%w: closed", ErrBroken))
	return nil
}

func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pending := c.pending
	c.pending = nil
	close(c.done)
	c.mu.Unlock()
	c.nc.Close()
	for _, cl := range pending {
		if cl.stream != nil {
			close(cl.stream)
			continue
		}
		if !cl.claimed {
			cl.err = err
			close(cl.done)
		}
	}
}

// Call sends a request and waits for its reply. req is encoded as the meta
// part and reqData sent as the data part. The reply's meta is decoded into
// resp (if not nil); its data is read into respBuf when it fits (returned
// as data[:n] aliasing respBuf) and into a new slice otherwise.
func (c *Conn) Call(ctx context.Context, op wire.Op, req any, reqData []byte, resp any, respBuf []byte) (data []byte, err error) {
	meta, err := wire.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode %s request: %w", op, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	cl := &call{op: op, buf: respBuf, done: make(chan struct{})}
	if s, ok := resp.(DataSink); ok {
		cl.sink = s
	}
	id, err := c.register(cl)
	if err != nil {
		return nil, err
	}
	if err := c.send(ctx, wire.TypeRequest, op, id, meta, reqData); err != nil {
		c.unregister(id)
		return nil, err
	}
	select {
	case <-cl.done:
	case <-ctx.Done():
		if c.abandon(id, cl) {
			return nil, fmt.Errorf("%s on %s: %w", op, c.addr, ctx.Err())
		}
		<-cl.done
	}
	if cl.err != nil {
		return nil, cl.err
	}
	if cl.typ == wire.TypeError {
		var we wire.Error
		if err := wire.Unmarshal(cl.meta, &we); err != nil {
			return nil, fmt.Errorf("%s: undecodable error reply: %w", op, err)
		}
		return nil, &we
	}
	if resp != nil {
		if err := wire.Unmarshal(cl.meta, resp); err != nil {
			return nil, fmt.Errorf("%s reply from %s: %w", op, c.addr, err)
		}
		if ds, ok := resp.(DataSummer); ok {
			if cl.summed {
				ds.SetDataSum(cl.sum)
			} else {
				ds.SetDataSum(wire.CRC(cl.data)) // no data, or a frame without a CRC
			}
		}
	}
	return cl.data, nil
}

// Watch sends a request whose replies are a stream of Notify frames, and
// calls fn with the meta of each until the stream ends, fn fails, ctx ends
// or the connection breaks.
func (c *Conn) Watch(ctx context.Context, op wire.Op, req any, fn func(meta []byte) error) error {
	meta, err := wire.Marshal(req)
	if err != nil {
		return err
	}
	cl := &call{op: op, done: make(chan struct{}), stream: make(chan []byte, 64)}
	id, err := c.register(cl)
	if err != nil {
		return err
	}
	defer c.unregister(id)
	if err := c.send(ctx, wire.TypeRequest, op, id, meta, nil); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			_ = c.send(context.Background(), wire.TypeCancel, op, id, nil, nil)
			return ctx.Err()
		case m, ok := <-cl.stream:
			if !ok {
				if err := c.Err(); err != nil {
					return err
				}
				return nil
			}
			if err := fn(m); err != nil {
				return err
			}
		}
	}
}

func (c *Conn) register(cl *call) (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	c.nextID++
	if c.nextID == 0 {
		c.nextID = 1
	}
	c.pending[c.nextID] = cl
	return c.nextID, nil
}

func (c *Conn) unregister(id uint32) {
	c.mu.Lock()
	if c.pending != nil {
		delete(c.pending, id)
	}
	c.mu.Unlock()
}

// abandon removes a call whose context ended. It returns false when the
// reader is already filling the call, which then completes shortly.
func (c *Conn) abandon(id uint32, cl *call) bool {
	c.mu.Lock()
	if cl.claimed {
		c.mu.Unlock()
		return false
	}
	if c.pending != nil {
		delete(c.pending, id)
	}
	c.mu.Unlock()
	_ = c.send(context.Background(), wire.TypeCancel, cl.op, id, nil, nil)
	return true
}

func (c *Conn) send(ctx context.Context, typ byte, op wire.Op, id uint32, meta, data []byte) error {
	hdr := make([]byte, 0, wire.HeaderSize+len(meta))
	hdr = wire.AppendHeader(hdr, typ, 0, op, id, meta, data)
	hdr = append(hdr, meta...)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.nc.SetWriteDeadline(dl)
	}
	if len(data) > 0 && len(data) < 64<<10 {
		hdr = append(hdr, data...)
		data = nil
	}
	_, err := c.nc.Write(hdr)
	if err == nil && len(data) > 0 {
		_, err = c.nc.Write(data)
	}
	if err != nil {
		err = fmt.Errorf("%w: sending %s to %s: %w", ErrBroken, op, c.addr, err)
		c.fail(err)
		return err
	}
	return nil
}

func (c *Conn) readLoop() {
	br := bufio.NewReaderSize(stamper{c}, 256<<10)
	var hb [wire.HeaderSize]byte
	for {
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			c.fail(fmt.Errorf("%w: %s: %w", ErrBroken, c.addr, err))
			return
		}
		h, err := wire.DecodeHeader(hb[:])
		if err != nil {
			c.fail(fmt.Errorf("%w: %s sent a %w", ErrBroken, c.addr, err))
			return
		}
		if err := c.readBody(br, h); err != nil {
			if we, ok := err.(*wire.Error); ok {
				c.fail(we)
				return
			}
			c.fail(fmt.Errorf("%w: %s: %w", ErrBroken, c.addr, err))
			return
		}
	}
}

func (c *Conn) readBody(br *bufio.Reader, h wire.Header) error {
	meta := make([]byte, h.MetaLen)
	if _, err := io.ReadFull(br, meta); err != nil {
		return err
	}
	c.mu.Lock()
	cl := c.pending[h.ID]
	if cl != nil && cl.stream == nil {
		cl.claimed = true
		delete(c.pending, h.ID)
	}
	c.mu.Unlock()

	var data []byte
	var crc uint32
	var sinkErr error
	switch {
	case h.DataLen > 0 && cl != nil && cl.sink != nil:
		var err error
		crc, sinkErr, err = readToSink(br, int(h.DataLen), cl.sink)
		if err != nil {
			cl.err = fmt.Errorf("%w: %w", ErrBroken, err)
			close(cl.done)
			return err
		}
	case h.DataLen > 0:
		if cl != nil && cl.stream == nil && uint32(cap(cl.buf)) >= h.DataLen {
			data = cl.buf[:h.DataLen]
		} else {
			data = make([]byte, h.DataLen)
		}
		// Sum the data piece by piece as it arrives, while it is in cache.
		for o := 0; o < len(data); {
			k := min(len(data)-o, wire.CRCChunk)
			if _, err := io.ReadFull(br, data[o:o+k]); err != nil {
				if cl != nil && cl.stream == nil {
					cl.err = fmt.Errorf("%w: %w", ErrBroken, err)
					close(cl.done)
				}
				return err
			}
			crc = wire.UpdateCRC(crc, data[o:o+k])
			o += k
		}
	}
	if err := h.CheckCRC(crc); err != nil {
		if cl != nil && cl.stream == nil {
			cl.err = err
			close(cl.done)
		}
		return err
	}
	if cl == nil {
		if h.ID == 0 && h.Type == wire.TypeError {
			// The server refused the whole connection; say why.
			we := &wire.Error{}
			if err := wire.Unmarshal(meta, we); err != nil {
				return err
			}
			return we
		}
		return nil // a call abandoned after its deadline
	}
	if cl.stream != nil {
		if h.Type == wire.TypeNotify {
			select {
			case cl.stream <- meta:
			default:
				return fmt.Errorf("watch %s fell behind", cl.op)
			}
		}
		if h.Type == wire.TypeError || h.Flags&wire.FlagEnd != 0 {
			c.mu.Lock()
			if c.pending != nil {
				delete(c.pending, h.ID)
			}
			c.mu.Unlock()
			close(cl.stream)
		}
		return nil
	}
	cl.typ, cl.meta, cl.data = h.Type, meta, data
	cl.sum, cl.summed = h.DataCRC, h.Flags&wire.FlagCRC != 0
	if sinkErr != nil {
		cl.err = sinkErr
	}
	close(cl.done)
	return nil
}

// sinkPage is the page size that pieces given to a DataSink are aligned to.
const sinkPage = 4096

// readToSink hands n bytes of data from br to sink in the pieces the read
// buffer holds, summing them on the way. It returns the CRC32C of all n
// bytes, the sink's first error (after which the rest is only read), and
// a read error (the connection is then broken).
func readToSink(br *bufio.Reader, n int, sink DataSink) (crc uint32, sinkErr, err error) {
	for o := 0; o < n; {
		// Whatever the buffer holds, or one fill of it: a piece is
		// summed and stored while it is in cache, and never copied.
		want := min(n-o, wire.CRCChunk, br.Size())
		if b := br.Buffered(); b > 0 {
			want = min(want, b)
		}
		// Pieces end on page boundaries (the data starts on one): a
		// file system fills a page that a write covers in part with
		// zeros first, which costs as much as the copy.
		if end := o + want; end < n && end%sinkPage != 0 {
			if down := end - end%sinkPage; down > o {
				want = down - o
			} else {
				want = min(n, down+sinkPage) - o // less than a page is buffered: wait for the rest of it
			}
		}
		p, err := br.Peek(want)
		if len(p) == 0 {
			return crc, sinkErr, err
		}
		crc = wire.UpdateCRC(crc, p)
		if sinkErr == nil {
			sinkErr = sink.WriteDataAt(p, o)
		}
		o += len(p)
		_, _ = br.Discard(len(p))
	}
	return crc, sinkErr, nil
}
