package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// The controller is off the data path: a client keeps using the mount table
// and the tokens it holds while no controller answers, until the tokens
// expire. It reads the table again after MountTTL and renews a token at
// renewAt of its life; when the controller cannot be reached it keeps what
// it holds and tries again later, backing off (docs/protocol.md, "When the
// controller cannot be reached").

const (
	// renewAt is the part of a token's life after which it is renewed.
	renewAt = 2.0 / 3
	// backoffMin and backoffMax bound the wait between attempts to reach a
	// controller that did not answer, for what can wait (a table or a
	// token still held).
	backoffMin = 500 * time.Millisecond
	backoffMax = 10 * time.Second
	// refreshWait is how long a request waits for a mount table being
	// read again while the controller is thought up, before it goes on
	// with the table held.
	refreshWait = time.Second
	// bgTimeout bounds a background request to the controller.
	bgTimeout = 15 * time.Second
	// dialEach bounds the dial of each address when there are several.
	dialEach = 5 * time.Second
)

// ErrControllerUnreachable matches errors of requests that needed a
// controller and reached none.
var ErrControllerUnreachable = errors.New("controller unreachable")

// ctrlError is a failure to reach any controller.
type ctrlError struct {
	msg string
	err error
}

func (e *ctrlError) Error() string        { return e.msg }
func (e *ctrlError) Unwrap() error        { return e.err }
func (e *ctrlError) Is(target error) bool { return target == ErrControllerUnreachable }

// health is what this client knows of the controller's reachability.
type health struct {
	mu       sync.Mutex
	state    string // "" (not asked yet), "up" or "down"
	since    time.Time
	lastErr  error
	errAt    time.Time
	failures int       // in a row
	errors   uint64    // in all
	next     time.Time // while down, no attempt that can wait before then
	addr     int       // index of the address that answered last
}

// unreachable reports whether err, of a request to a controller, says that
// no controller answered (not that one refused, nor that the caller gave
// up).
func unreachable(err error) bool {
	return err != nil && wire.CodeOf(err) == 0 && !errors.Is(err, context.Canceled)
}

// note records the outcome of a request to the controller.
func (c *Client) note(err error) {
	if wire.CodeOf(err) == 0 && errors.Is(err, context.Canceled) {
		return // cancelled by the caller: no news
	}
	h := &c.health
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if !unreachable(err) {
		if h.state != "up" {
			h.state, h.since = "up", now
		}
		h.failures = 0
		h.next = time.Time{}
		return
	}
	if h.state != "down" {
		h.state, h.since = "down", now
	}
	h.lastErr, h.errAt = err, now
	h.failures++
	h.errors++
	h.next = now.Add(backoff(h.failures))
}

// backoff is the wait after n failures in a row: doubling from backoffMin
// up to backoffMax, give or take a fifth so that clients spread out.
func backoff(n int) time.Duration {
	d := backoffMin << min(n-1, 10)
	d = min(d, backoffMax)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// mayTry reports whether an attempt that can wait (the table or a token is
// still held) should be made now.
func (c *Client) mayTry() bool { return c.mayTryBy(time.Time{}) }

// mayTryBy is mayTry for what is needed by deadline (a token's expiry):
// as it nears, attempts come closer together than the back-off says, at
// least every eighth of the time left (and at most every backoffMin), so
// that a controller back shortly before a token expires renews it.
func (c *Client) mayTryBy(deadline time.Time) bool {
	h := &c.health
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if h.state != "down" || !now.Before(h.next) {
		return true
	}
	if deadline.IsZero() {
		return false
	}
	return !now.Before(h.errAt.Add(max(deadline.Sub(now)/8, backoffMin)))
}

// ctrlDown reports whether the controller did not answer the last attempt.
func (c *Client) ctrlDown() bool {
	h := &c.health
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state == "down"
}

// lastCtrlErr is the last failure to reach the controller.
func (c *Client) lastCtrlErr() error {
	h := &c.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastErr == nil {
		return &ctrlError{msg: "the controller of " + c.cfg.Domain + " did not answer", err: rpc.ErrBroken}
	}
	return h.lastErr
}

// dialController dials the controller's addresses in turn, the one that
// answered last first.
func (c *Client) dialController(ctx context.Context) (*rpc.Conn, error) {
	c.health.mu.Lock()
	addrs, first := c.addrs, c.health.addr
	c.health.mu.Unlock()
	var last error
	for i := range addrs {
		j := (first + i) % len(addrs)
		dctx, cancel := ctx, context.CancelFunc(func() {})
		if len(addrs) > 1 {
			dctx, cancel = context.WithTimeout(ctx, dialEach)
		}
		conn, err := rpc.Dial(dctx, addrs[j], c.ctrlTLS, wire.ChannelControl)
		cancel()
		if err == nil {
			c.health.mu.Lock()
			if j < len(c.addrs) && c.addrs[j] == addrs[j] {
				c.health.addr = j
			}
			c.health.mu.Unlock()
			return conn, nil
		}
		last = explain(err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(addrs) == 1 {
		return nil, &ctrlError{msg: fmt.Sprintf("cannot connect to the controller of %s: %v", c.cfg.Domain, last), err: last}
	}
	return nil, &ctrlError{msg: fmt.Sprintf("cannot connect to any controller of %s (%s); the last one tried: %v",
		c.cfg.Domain, strings.Join(addrs, ", "), last), err: last}
}

// refreshMounts reads the mount table again in the background, unless a
// read is under way; it returns a channel closed when that read is done,
// and when it began.
func (c *Client) refreshMounts() (<-chan struct{}, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mountsDone != nil {
		return c.mountsDone, c.mountsFrom
	}
	done := make(chan struct{})
	c.mountsDone, c.mountsFrom = done, time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), bgTimeout)
		defer cancel()
		_, _ = c.readMounts(ctx) // on failure the table held stays
		c.mu.Lock()
		c.mountsDone = nil
		c.mu.Unlock()
		close(done)
	}()
	return done, c.mountsFrom
}

// readMounts asks the controller for the mount table and keeps it.
func (c *Client) readMounts(ctx context.Context) ([]wire.MountEntry, error) {
	c.mu.Lock()
	gen := c.mountsGen
	c.mu.Unlock()
	var resp wire.MountListResp
	if err := c.ControllerCall(ctx, wire.OpMountList, wire.Empty{}, &resp); err != nil {
		return nil, err
	}
	c.learnControllers(resp.Controllers)
	c.mu.Lock()
	if gen == c.mountsGen { // else the table was dropped meanwhile: this one may be older
		c.mounts, c.mountsAt = resp.Entries, time.Now()
	}
	c.mu.Unlock()
	return resp.Entries, nil
}

// renewSoon renews prefix's token in the background, unless a renewal is
// under way or the controller is being backed off from. A renewal that
// fails keeps the token held.
func (c *Client) renewSoon(prefix string, expires time.Time) {
	if !c.mayTryBy(expires) {
		return
	}
	c.mu.Lock()
	if c.closed || c.renewing[prefix] {
		c.mu.Unlock()
		return
	}
	c.renewing[prefix] = true
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			delete(c.renewing, prefix)
			c.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), bgTimeout)
		defer cancel()
		if resp, err := c.resolve(ctx, prefix, ""); err == nil {
			c.keepTarget(prefix, resp)
		}
	}()
}

// keepTarget stores a resolution (unless the mount table was dropped and
// prefix forgotten meanwhile).
func (c *Client) keepTarget(prefix string, resp wire.ResolveResp) *target {
	t := &target{ResolveResp: resp, fetched: time.Now()}
	c.mu.Lock()
	c.targets[prefix] = t
	c.mu.Unlock()
	return t
}

// keepFresh renews, ahead of expiry, the tokens used since they were
// fetched, until the client closes (Options.KeepFresh): an agent that goes
// quiet then finds its tokens good when the controller is away.
func (c *Client) keepFresh() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-tick.C:
		}
		now := time.Now()
		c.mu.Lock()
		due := make(map[string]time.Time)
		for prefix, t := range c.targets {
			if t.used.Load() && !now.Before(t.renewAt()) {
				due[prefix] = t.expires()
			}
		}
		c.mu.Unlock()
		for p, exp := range due {
			c.renewSoon(p, exp)
		}
	}
}

// ControllerStatus is what a client knows of its controller and holds from
// it.
type ControllerStatus struct {
	// State is "up" (the last request was answered), "down" (it was not)
	// or "unknown" (none was sent yet).
	State string    `json:"state"`
	Since time.Time `json:"since,omitzero"`
	// Addr is the address that answered last.
	Addr        string    `json:"addr"`
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// Errors counts the requests that reached no controller.
	Errors uint64 `json:"errors"`
	// NextAttempt is, while down, when the controller is tried again (for
	// what can wait: a request with nothing to fall back on tries at once;
	// a token nearing expiry is tried for sooner, see mayTryBy).
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	// MountTableAt is when the mount table held was read (zero if none).
	MountTableAt time.Time `json:"mount_table_at,omitzero"`
	// Tokens counts the tokens held; TokenExpires is the soonest expiry.
	Tokens       int       `json:"tokens"`
	TokenExpires time.Time `json:"token_expires,omitzero"`
}

// ControllerStatus says whether the controller answers, and how old the
// mount table and tokens this client holds are.
func (c *Client) ControllerStatus() ControllerStatus {
	var s ControllerStatus
	h := &c.health
	h.mu.Lock()
	s.State, s.Since, s.Errors = h.state, h.since, h.errors
	if s.State == "" {
		s.State = "unknown"
	}
	if h.addr < len(c.addrs) {
		s.Addr = c.addrs[h.addr]
	}
	if h.lastErr != nil {
		s.LastError, s.LastErrorAt = h.lastErr.Error(), h.errAt
	}
	down, next, errAt := h.state == "down", h.next, h.errAt
	h.mu.Unlock()
	now := time.Now()
	c.mu.Lock()
	if c.mounts != nil {
		s.MountTableAt = c.mountsAt
	}
	for _, t := range c.targets {
		exp := t.expires()
		if s.Tokens == 0 || exp.Before(s.TokenExpires) {
			s.TokenExpires = exp
		}
		s.Tokens++
		if down && t.used.Load() && !now.Before(t.renewAt()) {
			next = minTime(next, errAt.Add(max(exp.Sub(now)/8, backoffMin)))
		}
	}
	c.mu.Unlock()
	if down {
		s.NextAttempt = next
	}
	return s
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// learnControllers adds the domain's live controllers, as one of them
// lists them, to those this client tries: the configured ones stay first
// and in their order, so that a controller that is only away for a while
// is still tried, and one added since is tried too.
func (c *Client) learnControllers(live []string) {
	if c.fixed || len(live) == 0 {
		return
	}
	h := &c.health
	h.mu.Lock()
	defer h.mu.Unlock()
	var cur string
	if h.addr < len(c.addrs) {
		cur = c.addrs[h.addr]
	}
	addrs := c.cfg.ControllerAddrs()
	for _, a := range live {
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	c.addrs = addrs
	h.addr = max(0, slices.Index(addrs, cur))
}

// followMounts keeps the mount table up to date from the controller's
// stream of it (mount-watch), until the client closes: while the stream
// runs (the controller sends the table at each change and at least every
// 5 s), the table held is the current one and is not read again after
// MountTTL; a change made through any controller reaches this client at
// once. A stream silent for longer than liveFor counts as stopped. A stream that ends is started again, after 1 s and then with
// back-off to 10 s while no controller answers; meanwhile the table is
// read after MountTTL as before.
func (c *Client) followMounts() {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-c.done
		cancel()
	}()
	delay := time.Second
	for ctx.Err() == nil {
		err := c.ControllerWatch(ctx, wire.OpMountWatch, wire.Empty{}, func(meta []byte) error {
			var resp wire.MountListResp
			if err := wire.Unmarshal(meta, &resp); err != nil {
				return err
			}
			c.learnControllers(resp.Controllers)
			c.setMounts(resp.Entries)
			c.mountsLive.Store(time.Now().UnixNano())
			delay = time.Second
			return nil
		})
		c.mountsLive.Store(0)
		if ctx.Err() != nil {
			return
		}
		if wire.CodeOf(err) == wire.CodeUnknownOp {
			return // a controller from before mount-watch: the table is read after MountTTL
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
}

// setMounts takes a mount table from the controller's stream. A table that
// differs from the one held drops the tokens held (a prefix may now be
// another share's, or gone).
func (c *Client) setMounts(entries []wire.MountEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.EqualFunc(c.mounts, entries, wire.MountEntry.Equal) {
		c.mountsGen++
		c.targets = make(map[string]*target)
	}
	if entries == nil {
		entries = []wire.MountEntry{}
	}
	c.mounts, c.mountsAt = entries, time.Now()
}

// liveFor is how long after the controller last sent the mount table the
// stream counts as running (it sends one at least every 5 s).
const liveFor = 7 * time.Second

// mountsStreamed reports whether the table held came from a running
// mount-watch stream.
func (c *Client) mountsStreamed() bool {
	at := c.mountsLive.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < liveFor
}
