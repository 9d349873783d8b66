package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"pando.dev/pando/internal/remote"
	"slices"
	"sync"
	"time"

	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Share health. A share that stops answering is found out in seconds,
// not by TCP: a request that has waited silenceFloor (or rttFactor
// round trips, if more) with nothing received on its connection has the
// share pinged on its control channel, one ping per share shared by all
// waiters. A ping unanswered in that time marks the share down: its
// connections are closed, so that every request queued on them fails at
// once, with an UnreachableError; new requests fail at once too, with no
// dial, while one probe in the background (dial and ping, each bounded)
// looks for it to come back. A refused connection marks it down at once.
// Bulk requests keep no short deadline of their own: while the share
// answers pings they may take as long as the link needs (up to
// rpc.DefaultTimeout).
const (
	silenceFloor  = time.Second
	rttFactor     = 4
	handshakeMin  = 3 * time.Second // a dial's bound before the round trip is known, and its floor
	handshakeRTTs = 8
	probeMin      = 200 * time.Millisecond // the probe's first back-off
	probeMax      = 2 * time.Second        // and its longest
)

// HealthEvent says that a share went down or came back.
type HealthEvent = remote.HealthEvent

// ShareHealth is what the client knows of a share's reachability.
type ShareHealth = wire.ShareHealth

// shareHealth is one share's state; its fields are guarded by mu.
type shareHealth struct {
	mu      sync.Mutex
	down    bool
	since   time.Time
	lastErr error
	outages uint64
	srtt    time.Duration
	ping    *pingWait // the ping in flight, if any
	last    *target   // the target last used, for the probe's dials
	dials   map[uint64]context.CancelFunc
	dialID  uint64
	// silent: the share went down without a word (a ping or a dial
	// timed out); otherwise it refused or dropped connections, and may
	// have restarted elsewhere.
	silent    bool
	downAddrs []string // the addresses it could not be reached at
}

// mayHaveMoved reports whether a request to the share, which is down,
// should first ask the controller where it is now: it went down by
// refusing or dropping connections (its process is gone, and may have
// been restarted on another port), not by falling silent. The question
// costs a round trip to the controller, not a dial of the share.
func (s *shareConn) mayHaveMoved() bool {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.h.down && !s.h.silent
}

// moved reports whether t names other addresses than those the share
// could not be reached at; if so, the share is up again, to be tried
// there.
func (s *shareConn) moved(t *target) bool {
	s.h.mu.Lock()
	same := slices.Equal(t.Addrs, s.h.downAddrs)
	if !same {
		s.h.last = t
	}
	s.h.mu.Unlock()
	if same {
		return false
	}
	s.markUp()
	return true
}

// timeout reports whether err is a time out (no answer) rather than a
// refusal.
func timeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// untilDown returns a context that ends with ctx or when the share is
// marked down, whichever comes first; stop releases it.
func (s *shareConn) untilDown(ctx context.Context) (context.Context, func()) {
	dctx, cancel := context.WithCancel(ctx)
	s.h.mu.Lock()
	if s.h.down {
		s.h.mu.Unlock()
		cancel()
		return dctx, func() {}
	}
	if s.h.dials == nil {
		s.h.dials = make(map[uint64]context.CancelFunc)
	}
	s.h.dialID++
	id := s.h.dialID
	s.h.dials[id] = cancel
	s.h.mu.Unlock()
	return dctx, func() {
		s.h.mu.Lock()
		delete(s.h.dials, id)
		s.h.mu.Unlock()
		cancel()
	}
}

type pingWait struct {
	done chan struct{}
	ok   bool
}

// SetHealthHook has fn called (from the goroutine that found out) when a
// share goes down or comes back; without it, the client logs each change
// to Options.Log.
func (c *Client) SetHealthHook(fn func(HealthEvent)) {
	c.mu.Lock()
	c.hook = fn
	c.mu.Unlock()
}

// Health returns the state of every share this client has talked to.
func (c *Client) Health() []ShareHealth {
	c.mu.Lock()
	shares := make([]*shareConn, 0, len(c.shares))
	for _, s := range c.shares {
		shares = append(shares, s)
	}
	c.mu.Unlock()
	out := make([]ShareHealth, 0, len(shares))
	for _, s := range shares {
		s.h.mu.Lock()
		sh := ShareHealth{Share: s.name, Up: !s.h.down, Since: s.h.since, Outages: s.h.outages, RTT: s.h.srtt}
		if s.h.lastErr != nil {
			sh.LastErr = s.h.lastErr.Error()
		}
		s.h.mu.Unlock()
		out = append(out, sh)
	}
	return out
}

// DownErr returns, while share is marked down, the error its requests
// fail with (an UnreachableError); nil while it is up. It asks nobody.
func (c *Client) DownErr(share string) error {
	c.mu.Lock()
	s := c.shares[share]
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.downErr()
}

// Reachable returns nil unless the share of gpath is marked down, and
// then its error, but for a share that went down refusing connections
// and that the controller now places elsewhere (restarted on another
// port): that one is tried again. It dials nothing.
func (c *Client) Reachable(ctx context.Context, gpath string) error {
	loc, err := c.Locate(ctx, gpath)
	if err != nil || loc.Share == "" {
		return nil
	}
	c.mu.Lock()
	s := c.shares[loc.Share]
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	err = s.downErr()
	if err == nil || c.fixed || !s.mayHaveMoved() {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, s.handshakeBound())
	defer cancel()
	if nt, rerr := c.target(rctx, loc.Prefix, true); rerr == nil && nt.Share == s.name && s.moved(nt) {
		return nil
	}
	return s.downErr()
}

// threshold is how long a request waits with nothing received before the
// share is pinged, and how long the ping may take.
func (s *shareConn) threshold() time.Duration {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return max(silenceFloor, rttFactor*s.h.srtt)
}

// handshakeBound bounds a dial: TCP, TLS and the preface.
func (s *shareConn) handshakeBound() time.Duration {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return max(handshakeMin, handshakeRTTs*s.h.srtt)
}

// sample adds a measured round trip to the smoothed one.
func (s *shareConn) sample(d time.Duration) {
	s.h.mu.Lock()
	if s.h.srtt == 0 {
		s.h.srtt = d
	} else {
		s.h.srtt += (d - s.h.srtt) / 8
	}
	s.h.mu.Unlock()
}

// downErr is the error of a request to a share marked down, or nil.
func (s *shareConn) downErr() error {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if !s.h.down {
		return nil
	}
	return &UnreachableError{Share: s.name, Err: fmt.Errorf("%w (down for %s; retrying in the background)",
		s.h.lastErr, time.Since(s.h.since).Round(time.Second))}
}

// markDown marks the share down for cause, closes its connections (the
// requests on them fail together) and starts the probe.
func (s *shareConn) markDown(cause error) {
	var ue *UnreachableError
	if errors.As(cause, &ue) {
		cause = ue.Err
	}
	s.h.mu.Lock()
	if s.h.down {
		s.h.mu.Unlock()
		return
	}
	s.h.down, s.h.since, s.h.lastErr = true, time.Now(), cause
	s.h.silent = timeout(cause)
	s.h.downAddrs = nil
	if s.h.last != nil {
		s.h.downAddrs = slices.Clone(s.h.last.Addrs)
	}
	s.h.outages++
	since := s.h.since
	for id, cancel := range s.h.dials {
		cancel()
		delete(s.h.dials, id)
	}
	s.h.mu.Unlock()

	s.mu.Lock()
	var conns []*rpc.Conn
	if s.ctl != nil {
		conns = append(conns, s.ctl)
	}
	for _, d := range s.data {
		if d != nil {
			conns = append(conns, d)
		}
	}
	closed := s.closed
	for _, c := range conns {
		delete(s.slots, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	s.c.report(HealthEvent{Share: s.name, Since: since, Err: cause})
	if !closed {
		go s.probe()
	}
}

// markUp ends an outage.
func (s *shareConn) markUp() {
	s.h.mu.Lock()
	if !s.h.down {
		s.h.mu.Unlock()
		return
	}
	since := s.h.since
	s.h.down, s.h.since = false, time.Now()
	s.h.mu.Unlock()
	s.c.report(HealthEvent{Share: s.name, Up: true, Since: since})
}

func (c *Client) report(ev HealthEvent) {
	c.mu.Lock()
	hook := c.hook
	c.mu.Unlock()
	if hook != nil {
		hook(ev)
		return
	}
	if c.opts.Log == nil {
		return
	}
	if ev.Up {
		c.opts.Log.Info("share reachable again", "share", ev.Share, "down_for", time.Since(ev.Since).Round(time.Millisecond).String())
	} else {
		c.opts.Log.Warn("share unreachable", "share", ev.Share, "cause", ev.Err)
	}
}

// alive pings the share on its control channel, joining a ping already
// in flight, and marks it down if the ping goes unanswered. It reports
// whether the share answered (or anything arrived from it meanwhile).
func (s *shareConn) alive() bool {
	s.h.mu.Lock()
	if s.h.down {
		s.h.mu.Unlock()
		return false
	}
	w := s.h.ping
	if w == nil {
		w = &pingWait{done: make(chan struct{})}
		s.h.ping = w
		go s.runPing(w)
	}
	s.h.mu.Unlock()
	<-w.done
	return w.ok
}

func (s *shareConn) runPing(w *pingWait) {
	bound := s.threshold()
	sent := time.Now()
	err := s.ping(bound)
	if err != nil && s.heardSince(sent) {
		err = nil // congested, not silent
	}
	if err != nil {
		s.markDown(fmt.Errorf("no answer to a ping within %s: %w", bound, err))
	}
	s.h.mu.Lock()
	s.h.ping = nil
	s.h.mu.Unlock()
	w.ok = err == nil
	close(w.done)
}

// ping sends one ping on the control channel (dialling it, bounded, if
// it is not up) and waits at most bound for the answer.
func (s *shareConn) ping(bound time.Duration) error {
	s.h.mu.Lock()
	t := s.h.last
	s.h.mu.Unlock()
	if t == nil {
		return errors.New("no address known")
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.handshakeBound())
	defer cancel()
	ctl, err := s.connAt(ctx, t, -1)
	if err != nil {
		return err
	}
	pctx, pcancel := context.WithTimeout(context.Background(), bound)
	defer pcancel()
	sent := time.Now()
	s.c.count(wire.OpPing)
	if _, err := ctl.Call(pctx, wire.OpPing, wire.Empty{}, nil, nil, nil); err != nil {
		return err
	}
	s.sample(time.Since(sent))
	return nil
}

// heardSince reports whether any of the share's connections received
// bytes after t.
func (s *shareConn) heardSince(t time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	conns := append([]*rpc.Conn{s.ctl}, s.data...)
	for _, c := range conns {
		if c != nil && c.Err() == nil && c.LastRecv().After(t) {
			return true
		}
	}
	return false
}

// watch starts the watchdog of one request on conn; stop ends it.
func (s *shareConn) watch(conn *rpc.Conn) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var tm *time.Timer
	check := func() {
		th := s.threshold()
		if quiet := time.Since(conn.LastRecv()); quiet < th {
			mu.Lock()
			if !stopped {
				tm.Reset(th - quiet)
			}
			mu.Unlock()
			return
		}
		if conn.Err() != nil || !s.alive() {
			return
		}
		mu.Lock()
		if !stopped {
			tm.Reset(th)
		}
		mu.Unlock()
	}
	mu.Lock()
	tm = time.AfterFunc(s.threshold(), check)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		tm.Stop()
		mu.Unlock()
	}
}

// callOn runs one request on conn under the watchdog.
func (s *shareConn) callOn(ctx context.Context, conn *rpc.Conn, op wire.Op, req any, data []byte, resp any, buf []byte) ([]byte, error) {
	stop := s.watch(conn)
	out, err := conn.Call(ctx, op, req, data, resp, buf)
	stop()
	return out, err
}

// probe looks for a share marked down to come back: a dial and a ping,
// each bounded, with back-off; the controller is asked now and then
// whether the share moved.
func (s *shareConn) probe() {
	wait := probeMin
	for round := 0; ; round++ {
		time.Sleep(wait)
		wait = min(2*wait, probeMax)
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return
		}
		s.h.mu.Lock()
		t := s.h.last
		s.h.mu.Unlock()
		if t == nil {
			continue
		}
		err := s.probeOnce(t)
		if err == nil {
			s.markUp()
			return
		}
		s.h.mu.Lock()
		s.h.lastErr = err
		s.h.silent = timeout(err) // a frozen share may have been killed since
		silent := s.h.silent
		s.h.mu.Unlock()
		if (!silent || round%3 == 2) && !s.c.fixed {
			// Restarted elsewhere (another port)? Ask where it is now.
			ctx, cancel := context.WithTimeout(context.Background(), s.handshakeBound())
			if nt, rerr := s.c.target(ctx, t.Prefix, true); rerr == nil && nt.Share == s.name {
				s.h.mu.Lock()
				s.h.last = nt
				s.h.mu.Unlock()
			}
			cancel()
		}
	}
}

// probeOnce dials the control channel and pings it.
func (s *shareConn) probeOnce(t *target) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.handshakeBound())
	defer cancel()
	conn, err := s.dial(ctx, t, wire.ChannelControl)
	if err != nil {
		return unwrapUnreachable(err)
	}
	pctx, pcancel := context.WithTimeout(context.Background(), s.threshold())
	defer pcancel()
	sent := time.Now()
	s.c.count(wire.OpPing)
	if _, err := conn.Call(pctx, wire.OpPing, wire.Empty{}, nil, nil, nil); err != nil {
		conn.Close()
		return fmt.Errorf("no answer to a ping: %w", err)
	}
	s.sample(time.Since(sent))
	s.mu.Lock()
	if s.closed || s.ctl != nil && s.ctl.Err() == nil {
		conn.Close()
	} else {
		if s.ctl != nil {
			delete(s.slots, s.ctl)
		}
		s.ctl = conn
	}
	s.mu.Unlock()
	return nil
}

func unwrapUnreachable(err error) error {
	var ue *UnreachableError
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// dialFailed decides what a failed dial says about the share: it is
// marked down (a refused connection, a handshake that timed out, no
// address known), but not for a dial ended by the caller's own context.
func (s *shareConn) dialFailed(ctx context.Context, err error) {
	if ctx.Err() != nil || !errors.Is(err, ErrUnreachable) {
		return
	}
	s.markDown(err)
}
