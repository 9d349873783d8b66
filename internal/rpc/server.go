package rpc

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"pando.dev/pando/internal/wire"
)

// Request is one request as a Handler sees it.
type Request struct {
	Op   wire.Op
	ID   uint32
	Meta []byte
	Data []byte // the request's data part; valid until the handler returns
	Conn *ServerConn

	notified bool
	dataSum  uint32
	summed   bool
}

// DataSum returns the CRC32C of Data, if its frame carried one (which the
// data matched on arrival): a handler that checks the data against a sum
// of its own need not compute it again.
func (r *Request) DataSum() (uint32, bool) { return r.dataSum, r.summed }

// Decode decodes the request's meta into v; failures are CodeMalformed.
func (r *Request) Decode(v any) error {
	if err := wire.Unmarshal(r.Meta, v); err != nil {
		return &wire.Error{Code: wire.CodeMalformed, Message: fmt.Sprintf("malformed %s request: %v", r.Op, err)}
	}
	return nil
}

// Notify sends one notification on a watch request.
func (r *Request) Notify(v any) error {
	meta, err := wire.Marshal(v)
	if err != nil {
		return err
	}
	r.notified = true
	return r.Conn.write(wire.TypeNotify, 0, r.Op, r.ID, meta, nil)
}

// Reply is what a handler returns: a message and optional data. Release, if
// set, is called once the data has been written (to recycle buffers).
type Reply struct {
	Msg     any
	Data    []byte
	Release func()
	// DataSum, if set, is the CRC32C of Data, which the handler computed
	// already (as it read the data, while it was in cache).
	DataSum *uint32
	// File, instead of Data, is data sent straight from a file; only on
	// a connection that CanSendFile.
	File *FileData
}

// Handler serves requests. It returns a Reply or an error; errors that are
// not *wire.Error are sent as CodeIO with their text.
type Handler interface {
	Serve(ctx context.Context, req *Request) (Reply, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req *Request) (Reply, error)

// Serve calls f.
func (f HandlerFunc) Serve(ctx context.Context, req *Request) (Reply, error) { return f(ctx, req) }

// ConnHooks lets a role keep per-connection state (token slots, handles).
type ConnHooks interface {
	// Opened is called after the preface; an error refuses the connection.
	Opened(c *ServerConn) error
	// Closed is called once when the connection ends.
	Closed(c *ServerConn)
}

// Server accepts connections and dispatches their requests.
type Server struct {
	Handler Handler
	Hooks   ConnHooks // optional
	TLS     *tls.Config
	Log     *slog.Logger
	// MaxInFlight bounds concurrent requests per connection (default 64).
	MaxInFlight int
	// Sniff: Serve gets a plain TCP listener; connections that open with
	// a TLS handshake get TLS, the others must be plain data channels
	// (see DialPlain), which Hooks.Opened admits by their ticket.
	Sniff bool
	// FrameTimeout and FrameRate bound the wait for a frame begun: it
	// must be whole within FrameTimeout plus its length at FrameRate
	// bytes a second (defaults DefaultFrameTimeout, DefaultFrameRate).
	FrameTimeout time.Duration
	FrameRate    int64

	mu    sync.Mutex
	ln    net.Listener
	conns map[*ServerConn]struct{}
	wg    sync.WaitGroup
	quit  chan struct{}
}

// ServerConn is the server end of one connection.
type ServerConn struct {
	srv     *Server
	nc      net.Conn
	Channel byte
	// State belongs to the role's hooks.
	State any
	// Ticket and Proof open a plain data channel (empty otherwise).
	Ticket, Proof []byte
	tcp           *net.TCPConn // under a clear data channel: for sendfile

	wmu     sync.Mutex
	ended   bool         // End sent the last frame (under wmu)
	endBy   atomic.Int64 // when an ended connection closes (unix ns)
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	running map[uint32]context.CancelFunc
}

// TLSState returns the TLS connection state.
func (c *ServerConn) TLSState() tls.ConnectionState {
	if tc, ok := c.nc.(*tls.Conn); ok {
		return tc.ConnectionState()
	}
	return tls.ConnectionState{}
}

// RemoteAddr is the peer's address.
func (c *ServerConn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// From is the peer's address as text, for records: "" for a connection
// that has none (one a test made without a network connection).
func (c *ServerConn) From() string {
	if c.nc == nil || c.nc.RemoteAddr() == nil {
		return ""
	}
	return c.nc.RemoteAddr().String()
}

// Close ends the connection.
func (c *ServerConn) Close() { c.cancel(); c.nc.Close() }

// Context is cancelled when the connection ends.
func (c *ServerConn) Context() context.Context { return c.ctx }

// Serve accepts connections on ln until Close. It returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.quit == nil {
		s.quit = make(chan struct{})
	}
	s.ln = ln
	if s.conns == nil {
		s.conns = make(map[*ServerConn]struct{})
	}
	s.mu.Unlock()
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			select {
			case <-s.quit:
				return nil
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTemporary(err)) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(nc)
		}()
	}
}

func errTemporary(err error) error {
	// EMFILE and friends: back off instead of spinning or giving up.
	type temp interface{ Temporary() bool }
	if t, ok := err.(temp); ok && t.Temporary() {
		return err
	}
	return errors.New("not temporary")
}

// Close stops accepting, ends every connection and waits for handlers.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.quit == nil {
		s.quit = make(chan struct{})
	}
	select {
	case <-s.quit:
	default:
		close(s.quit)
	}
	if s.ln != nil {
		s.ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *Server) handle(nc net.Conn) {
	defer nc.Close()
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	_ = nc.SetDeadline(time.Now().Add(15 * time.Second))
	plain := false
	if _, ok := nc.(*tls.Conn); !ok && s.Sniff {
		sc := &sniffed{Conn: nc, r: bufio.NewReader(nc)}
		first, err := sc.r.Peek(1)
		if err != nil {
			return
		}
		if first[0] == 0x16 { // a TLS handshake record
			nc = tls.Server(sc, s.TLS)
		} else {
			nc, plain = sc, true
		}
	}
	if tc, ok := nc.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			s.Log.Info("TLS handshake refused", "peer", nc.RemoteAddr().String(), "err", err)
			return
		}
	}
	var p wire.Preface
	var ticket, proof []byte
	if plain {
		// The client speaks first: preface, ticket, proof. The share
		// answers with its preface only once the ticket is accepted.
		var err error
		if p, err = wire.ReadPreface(nc); err != nil || !IsPlain(p.Channel) {
			s.Log.Info("connection without TLS refused", "peer", nc.RemoteAddr().String(), "err", err)
			return
		}
		open := make([]byte, TicketSize+ProofSize)
		if _, err := io.ReadFull(nc, open); err != nil {
			return
		}
		ticket, proof = open[:TicketSize], open[TicketSize:]
	} else {
		if _, err := nc.Write(wire.EncodePreface(wire.Preface{Version: wire.Version})); err != nil {
			return
		}
		var err error
		if p, err = wire.ReadPreface(nc); err != nil {
			s.Log.Info("connection refused", "peer", nc.RemoteAddr().String(), "err", err)
			return
		}
		if IsPlain(p.Channel) {
			return // a plain channel's preface inside TLS: confused peer
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &ServerConn{srv: s, nc: nc, Channel: p.Channel, ctx: ctx, cancel: cancel, running: make(map[uint32]context.CancelFunc),
		Ticket: ticket, Proof: proof}
	if plain {
		c.tcp = clearTCP(nc, p.Channel)
	}
	defer cancel()
	s.mu.Lock()
	select {
	case <-s.quit:
		s.mu.Unlock()
		return
	default:
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	if plain && s.Hooks == nil {
		return // nobody to check the ticket
	}
	if s.Hooks != nil {
		if err := s.Hooks.Opened(c); err != nil {
			if !plain {
				_ = c.writeError(0, 0, wire.FromError(err))
			}
			s.Log.Info("connection refused", "peer", nc.RemoteAddr().String(), "err", err)
			return
		}
		defer s.Hooks.Closed(c)
	}
	if plain {
		if _, err := nc.Write(wire.EncodePreface(wire.Preface{Version: wire.Version})); err != nil {
			return
		}
		if p.Channel == wire.ChannelDataSafe {
			if _, ok := c.nc.(*macConn); !ok {
				return // Opened must have turned authentication on
			}
		}
	}
	_ = nc.SetDeadline(time.Time{})
	c.serve()
}

func (c *ServerConn) serve() {
	limit := c.srv.MaxInFlight
	if limit <= 0 {
		limit = 64
	}
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.cancel()
	br := bufio.NewReaderSize(c.nc, 256<<10)
	for {
		f, release, err := c.readFrame(br)
		if err != nil {
			switch {
			case c.endBy.Load() != 0:
				// ended: the linger is over, or the peer closed
			case errors.Is(err, wire.ErrMalformed):
				c.srv.Log.Warn("malformed frame; closing connection", "peer", c.nc.RemoteAddr().String(), "err", err)
				_ = c.writeError(0, 0, &wire.Error{Code: wire.CodeMalformed, Message: "the server received a " + err.Error() + "; closing this connection"})
			case errors.Is(err, errFrameTimeout):
				timeout, rate := c.srv.frameBounds()
				c.srv.Log.Info("frame not completed in time; closing connection", "peer", c.nc.RemoteAddr().String(), "err", err)
				_ = c.writeError(0, 0, &wire.Error{Code: wire.CodeUnavailable, Message: fmt.Sprintf(
					"the server received part of a frame, and the rest did not follow at %d KiB/s or more within %s; closing this connection", rate>>10, timeout)})
			case !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
				c.srv.Log.Debug("connection ended", "peer", c.nc.RemoteAddr().String(), "err", err)
			}
			return
		}
		if c.endBy.Load() != 0 {
			if release != nil {
				release()
			}
			continue // ended: what arrives now is dropped
		}
		if release != nil && f.Type != wire.TypeRequest {
			release() // nothing reads the data of other frames
			release = nil
		}
		switch f.Type {
		case wire.TypeCancel:
			c.mu.Lock()
			if cancel := c.running[f.ID]; cancel != nil {
				cancel()
			}
			c.mu.Unlock()
			continue
		case wire.TypeRequest:
		default:
			_ = c.writeError(f.ID, f.Op, &wire.Error{Code: wire.CodeMalformed, Message: fmt.Sprintf("unexpected frame type %d from a client; closing this connection", f.Type)})
			return
		}
		select {
		case sem <- struct{}{}:
		case <-c.ctx.Done():
			if release != nil {
				release()
			}
			return
		}
		rctx, cancel := context.WithCancel(c.ctx)
		c.mu.Lock()
		c.running[f.ID] = cancel
		c.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if release != nil {
				defer release() // Request.Data is valid until the handler returns
			}
			defer func() {
				c.mu.Lock()
				delete(c.running, f.ID)
				c.mu.Unlock()
				cancel()
			}()
			c.dispatch(rctx, f)
		}()
	}
}

func (c *ServerConn) dispatch(ctx context.Context, f *wire.Frame) {
	req := &Request{Op: f.Op, ID: f.ID, Meta: f.Meta, Data: f.Data, Conn: c,
		dataSum: f.DataCRC, summed: f.Flags&wire.FlagCRC != 0}
	rep, err := c.srv.Handler.Serve(ctx, req)
	if rep.Release != nil {
		defer rep.Release()
	}
	if err != nil {
		_ = c.writeError(f.ID, f.Op, wire.FromError(err))
		return
	}
	if req.notified {
		_ = c.write(wire.TypeNotify, wire.FlagEnd, f.Op, f.ID, nil, nil)
		return
	}
	msg := rep.Msg
	if msg == nil {
		msg = wire.Empty{}
	}
	meta, err := wire.Marshal(msg)
	if err != nil {
		_ = c.writeError(f.ID, f.Op, &wire.Error{Code: wire.CodeInternal, Message: err.Error()})
		return
	}
	if rep.File != nil && c.tcp != nil {
		if err := c.writeFile(wire.TypeResponse, f.Op, f.ID, meta, rep.File); err != nil {
			c.srv.Log.Info("sending file data failed; connection closed", "peer", c.nc.RemoteAddr().String(), "op", f.Op.String(), "err", err)
		}
		return
	}
	if rep.File != nil {
		_ = c.writeError(f.ID, f.Op, &wire.Error{Code: wire.CodeInternal, Message: "file data on a connection that cannot send it"})
		return
	}
	_ = c.writeSummed(wire.TypeResponse, 0, f.Op, f.ID, meta, rep.Data, rep.DataSum)
}

func (c *ServerConn) writeError(id uint32, op wire.Op, we *wire.Error) error {
	meta, err := wire.Marshal(we)
	if err != nil {
		return err
	}
	return c.write(wire.TypeError, 0, op, id, meta, nil)
}

func (c *ServerConn) write(typ, flags byte, op wire.Op, id uint32, meta, data []byte) error {
	return c.writeSummed(typ, flags, op, id, meta, data, nil)
}

// writeSummed is write with the CRC32C of data, if sum is set.
func (c *ServerConn) writeSummed(typ, flags byte, op wire.Op, id uint32, meta, data []byte, sum *uint32) error {
	// Small data goes out in the same write as the header; larger data
	// is written from where it is.
	inline := len(data) < 64<<10
	size := wire.HeaderSize + len(meta)
	if inline {
		size += len(data)
	}
	buf := make([]byte, 0, size)
	if sum != nil {
		buf = wire.AppendHeaderCRC(buf, typ, flags, op, id, meta, data, *sum)
	} else {
		buf = wire.AppendHeader(buf, typ, flags, op, id, meta, data)
	}
	buf = append(buf, meta...)
	if inline {
		buf = append(buf, data...)
		data = nil
	}
	return c.send(buf, func() error {
		if len(data) > 0 {
			_, err := c.nc.Write(data)
			return err
		}
		return nil
	})
}

// send writes one frame: head, then what rest writes, with nothing of
// another frame in between. A failure ends the connection: the peer could
// not tell where the next frame begins.
func (c *ServerConn) send(head []byte, rest func() error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.ended {
		return fmt.Errorf("%w: the connection was ended", ErrBroken)
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(DefaultTimeout))
	_, err := c.nc.Write(head)
	if err == nil {
		err = rest()
	}
	if err != nil {
		c.nc.Close()
	}
	return err
}

// EachConn calls fn for every open connection.
func (s *Server) EachConn(fn func(c *ServerConn)) {
	s.mu.Lock()
	conns := make([]*ServerConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		fn(c)
	}
}
