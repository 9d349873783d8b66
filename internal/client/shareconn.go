package client

import (
	"context"
	"errors"
	"fmt"
	"pando.dev/pando/internal/remote"
	"sync"
	"sync/atomic"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// shareConn holds the channels to one share: a control channel (metadata,
// opens) and Streams data channels (bulk reads and writes).
type shareConn struct {
	c    *Client
	name string

	mu    sync.Mutex
	ctl   *rpc.Conn
	data  []*rpc.Conn
	slots map[*rpc.Conn]map[string]slot // conn -> token (by prefix) -> slot
	next  atomic.Uint32
	// dialing holds a channel per dial under way (by connAt's idx),
	// closed when it is done.
	dialing map[int]chan struct{}
	closed  bool

	h shareHealth // reachability (see health.go)
}

type slot struct {
	tok   uint32
	token []byte // the token installed, to notice renewals
}

func (c *Client) share(name string) *shareConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.shares[name]
	if s == nil {
		s = &shareConn{c: c, name: name, slots: make(map[*rpc.Conn]map[string]slot)}
		s.h.since = time.Now()
		c.shares[name] = s
	}
	return s
}

func (s *shareConn) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.ctl != nil {
		s.ctl.Close()
	}
	for _, d := range s.data {
		if d != nil {
			d.Close()
		}
	}
}

func (s *shareConn) dial(ctx context.Context, t *target, channel byte) (*rpc.Conn, error) {
	name := s.name
	conf, err := s.c.cfg.ClientTLS(func(id auth.Identity) error {
		if id.Role != auth.RoleShare || id.Name != name {
			return fmt.Errorf("expected share %s, but the server is %s", name, id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.c.presentCert(conf)
	// A frozen share accepts TCP connections (its kernel does) but
	// never answers the TLS handshake: the dial is bounded.
	bound := s.handshakeBound()
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var last error
	for _, addr := range t.Addrs {
		conn, err := rpc.Dial(ctx, addr, conf, channel)
		if err == nil {
			return conn, nil
		}
		if ctx.Err() == context.DeadlineExceeded {
			last = fmt.Errorf("%s did not complete a connection within %s: %w", addr, bound, ctx.Err())
			break
		}
		last = explain(err)
	}
	if last == nil {
		last = errors.New("the controller knows no address for it")
	}
	return nil, &UnreachableError{Share: name, Err: last}
}

// ErrUnreachable matches errors of shares that could not be reached: a new
// attempt later may succeed.
var ErrUnreachable = remote.ErrUnreachable

// UnreachableError says which share could not be reached, and why.
type UnreachableError struct {
	Share string
	Err   error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach share %s: %v", e.Share, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnreachable) true.
func (e *UnreachableError) Is(target error) bool { return target == ErrUnreachable }

// dialPlain opens a data channel without TLS ("safe" or "clear") with a
// ticket from the control channel, at the address the control channel
// reached.
func (s *shareConn) dialPlain(ctx context.Context, t *target) (*rpc.Conn, error) {
	ctl, err := s.conn(ctx, t, false)
	if err != nil {
		return nil, err
	}
	var resp wire.TicketResp
	s.c.count(wire.OpTicket)
	if _, err := s.callOn(ctx, ctl, wire.OpTicket, wire.TicketReq{Protection: s.c.opts.Protection}, nil, &resp, nil); err != nil {
		return nil, err
	}
	st, _ := ctl.ConnectionState()
	key, err := rpc.ChannelKey(&st, resp.Ticket)
	if err != nil {
		return nil, err
	}
	ch := wire.ChannelDataSafe
	if s.c.opts.Protection == "clear" {
		ch = wire.ChannelDataClear
	}
	bound := s.handshakeBound()
	dctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	conn, err := rpc.DialPlain(dctx, ctl.Addr(), ch, resp.Ticket, key)
	if err != nil {
		return nil, &UnreachableError{Share: s.name, Err: err}
	}
	return conn, nil
}

// conn returns the control channel, or a data channel (round robin) when
// data is set.
func (s *shareConn) conn(ctx context.Context, t *target, data bool) (*rpc.Conn, error) {
	idx := -1
	if data {
		s.mu.Lock()
		if len(s.data) == 0 {
			s.data = make([]*rpc.Conn, s.c.opts.Streams)
		}
		idx = int(s.next.Add(1)) % len(s.data)
		s.mu.Unlock()
	}
	return s.connAt(ctx, t, idx)
}

// slotLocked is where channel idx lives: the control channel for idx < 0,
// else data channel idx.
func (s *shareConn) slotLocked(idx int) **rpc.Conn {
	if idx < 0 {
		return &s.ctl
	}
	if len(s.data) == 0 {
		s.data = make([]*rpc.Conn, s.c.opts.Streams)
	}
	return &s.data[idx]
}

// connAt returns channel idx (see slotLocked), dialling it if it is not
// up. Callers that find a dial of it under way wait for that dial.
func (s *shareConn) connAt(ctx context.Context, t *target, idx int) (*rpc.Conn, error) {
	for {
		if err := s.downErr(); err != nil {
			return nil, err
		}
		s.mu.Lock()
		cur := *s.slotLocked(idx)
		if cur != nil && cur.Err() == nil {
			s.mu.Unlock()
			return cur, nil
		}
		if w := s.dialing[idx]; w != nil {
			s.mu.Unlock()
			select {
			case <-w:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if s.dialing == nil {
			s.dialing = make(map[int]chan struct{})
		}
		w := make(chan struct{})
		s.dialing[idx] = w
		s.mu.Unlock()

		var conn *rpc.Conn
		var err error
		// A dial under way when the share is marked down ends then.
		dctx, stop := s.untilDown(ctx)
		switch {
		case idx < 0:
			conn, err = s.dial(dctx, t, wire.ChannelControl)
		case s.c.opts.Protection != "" && s.c.opts.Protection != "private":
			conn, err = s.dialPlain(dctx, t)
		default:
			conn, err = s.dial(dctx, t, wire.ChannelData)
		}
		stop()
		if err != nil {
			if derr := s.downErr(); derr != nil && ctx.Err() == nil {
				err = derr
			}
		}
		s.mu.Lock()
		delete(s.dialing, idx)
		close(w)
		if err == nil && s.closed {
			conn.Close()
			err = rpc.ErrBroken
		}
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		slotp := s.slotLocked(idx)
		if *slotp != nil {
			delete(s.slots, *slotp)
		}
		*slotp = conn
		early := idx < 0 && s.c.opts.EarlyData
		s.mu.Unlock()
		if early {
			go s.warm(t)
		}
		return conn, nil
	}
}

// warm opens the data channels and installs t's token on them, in the
// background, while the control channel serves the first requests: a
// reader's first bulk request then finds them up instead of waiting for
// their handshakes (some round trips each, on a long path).
func (s *shareConn) warm(t *target) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range s.c.opts.Streams {
		wg.Go(func() {
			if conn, err := s.connAt(ctx, t, i); err == nil {
				_, _ = s.tok(ctx, conn, t)
			}
		})
	}
	wg.Wait()
}

// tok returns the slot of t's token on conn, installing it if needed.
func (s *shareConn) tok(ctx context.Context, conn *rpc.Conn, t *target) (uint32, error) {
	s.mu.Lock()
	sl, ok := s.slots[conn][t.Prefix]
	s.mu.Unlock()
	if ok && string(sl.token) == string(t.Token) {
		return sl.tok, nil
	}
	var resp wire.AuthResp
	s.c.count(wire.OpAuth)
	sent := time.Now()
	if _, err := s.callOn(ctx, conn, wire.OpAuth, wire.AuthReq{Token: t.Token, Session: s.c.opts.Session}, nil, &resp, nil); err != nil {
		return 0, err
	}
	s.mu.Lock()
	m := s.slots[conn]
	if m == nil {
		m = make(map[string]slot)
		s.slots[conn] = m
	}
	m[t.Prefix] = slot{tok: resp.Tok, token: t.Token}
	s.mu.Unlock()
	s.sample(time.Since(sent))
	return resp.Tok, nil
}

// forgetSlot forgets that prefix's token is installed on conn.
func (s *shareConn) forgetSlot(conn *rpc.Conn, prefix string) {
	s.mu.Lock()
	delete(s.slots[conn], prefix)
	s.mu.Unlock()
}

// Request builds a request message for a token slot.
type Request func(tok uint32) any

// call runs one share operation for loc. For handle-bound calls, pin names
// the connection the handle lives on (handles survive only with it).
func (c *Client) call(ctx context.Context, loc Loc, op wire.Op, build Request, data []byte, resp any, buf []byte, channel *rpc.Conn, dataCh bool) ([]byte, *rpc.Conn, error) {
	if loc.Share == "" {
		return nil, nil, &wire.Error{Code: wire.CodeNotSupp, Message: fmt.Sprintf("%s is a directory of the namespace, above every share: it holds mounts, not files", loc.Global)}
	}
	force, reinstalled := false, false
	for attempt := 0; attempt < 3; attempt++ {
		t, err := c.target(ctx, loc.Prefix, force)
		if err != nil {
			return nil, nil, err
		}
		sc := c.share(t.Share)
		sc.h.mu.Lock()
		sc.h.last = t
		sc.h.mu.Unlock()
		if err := sc.downErr(); err != nil {
			if channel == nil && !force && !c.fixed && sc.mayHaveMoved() {
				// Restarted elsewhere? One question to the controller.
				rctx, cancel := context.WithTimeout(ctx, sc.handshakeBound())
				nt, rerr := c.target(rctx, loc.Prefix, true)
				cancel()
				if rerr == nil && nt.Share == sc.name && sc.moved(nt) {
					force = true
					continue
				}
			}
			return nil, nil, err
		}
		conn := channel
		if conn == nil {
			conn, err = sc.conn(ctx, t, dataCh)
			if err != nil && !force && errors.Is(err, ErrUnreachable) && ctx.Err() == nil {
				// The share may have moved (restarted on another port,
				// re-registered): ask the controller where it is now.
				if nt, rerr := c.target(ctx, loc.Prefix, true); rerr == nil && !sameAddrs(nt, t) {
					force = true
					continue
				}
			}
			if err != nil {
				sc.dialFailed(ctx, err)
				if derr := sc.downErr(); derr != nil {
					return nil, nil, derr
				}
				return nil, nil, err
			}
		}
		tok, err := sc.tok(ctx, conn, t)
		if err == nil {
			var out []byte
			c.count(op)
			out, err = sc.callOn(ctx, conn, op, build(tok), data, resp, buf)
			if err == nil {
				c.data.Add(int64(len(data) + len(out)))
				return out, conn, nil
			}
		}
		var we *wire.Error
		if errors.As(err, &we) && conn != nil && conn.Err() == err {
			// The share ended the connection and said why (a revoked
			// principal): no fresh token or connection changes that.
			return nil, conn, err
		}
		if wire.CodeOf(err) == wire.CodeNoToken && !reinstalled {
			// The share lost the slot, not the token: install it again
			// (which needs no controller).
			reinstalled = true
			sc.forgetSlot(conn, t.Prefix)
			continue
		}
		switch wire.FateOf(err) {
		case wire.Renew:
			// The share did not act on the request: renew and go again.
			force = true
			continue
		case wire.Refused:
			return nil, conn, err // never sent again
		}
		if errors.Is(err, rpc.ErrBroken) {
			if derr := sc.downErr(); derr != nil {
				// Closed by the watchdog (or broken at the same time):
				// every request on the share fails together.
				return nil, conn, derr
			}
			if channel == nil && op.Idempotent() && attempt == 0 {
				continue
			}
			return nil, conn, &UnreachableError{Share: t.Share, Err: err}
		}
		return nil, conn, err
	}
	return nil, nil, fmt.Errorf("%s %s: the share keeps refusing fresh tokens", op, loc.Global)
}

// sameAddrs reports whether two resolutions name the same addresses.
func sameAddrs(a, b *target) bool {
	if len(a.Addrs) != len(b.Addrs) {
		return false
	}
	for i := range a.Addrs {
		if a.Addrs[i] != b.Addrs[i] {
			return false
		}
	}
	return true
}
