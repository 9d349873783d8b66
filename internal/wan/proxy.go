package wan

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Config describes the emulated link. Every direction of every proxied
// connection gets its own link with these properties.
type Config struct {
	// RTT is the round-trip time; each direction delays data by RTT/2.
	RTT time.Duration
	// Rate is the capacity of each direction of each connection, in bits
	// per second; 0 means unlimited. Connections do not share a rate
	// unless Shared is set.
	Rate int64
	// Shared makes Rate the capacity of the whole link: all connections
	// share it, per direction, as flows share a WAN bottleneck.
	Shared bool
	// Loss is the probability (0..1) that a chunk is "lost" and arrives one
	// RTT late, holding up everything behind it (no effect when RTT is 0).
	// See the package comment.
	Loss float64
	// Buffer bounds the bytes held per direction per connection; 0 picks
	// Rate×RTT/8 plus a margin of max(Rate×25ms/8, 4 chunks), or 4 MiB
	// when Rate is unlimited.
	Buffer int
}

const (
	maxChunk        = 64 << 10
	minChunk        = 4 << 10
	unlimitedBuffer = 4 << 20
	dialTimeout     = 10 * time.Second
)

// chunkSize is the read size: about 2 ms of serialisation at the rate,
// between 4 KiB and 64 KiB, never above the buffer.
func chunkSize(cfg Config) int {
	n := maxChunk
	if cfg.Rate > 0 {
		n = int(min(max(cfg.Rate/8*2/1000, minChunk), maxChunk))
	}
	if cfg.Buffer > 0 && n > cfg.Buffer {
		n = cfg.Buffer
	}
	return n
}

// autoBuffer is the default bound: a bandwidth-delay product plus margin.
func autoBuffer(cfg Config) int {
	if cfg.Rate <= 0 {
		return unlimitedBuffer
	}
	bdp := float64(cfg.Rate) / 8 * cfg.RTT.Seconds()
	margin := max(float64(cfg.Rate)/8*0.025, 4*float64(chunkSize(cfg)))
	b := bdp + margin
	if b > 1<<30 {
		b = 1 << 30
	}
	return int(math.Ceil(b))
}

func (c Config) validate() error {
	switch {
	case c.RTT < 0:
		return fmt.Errorf("wan: negative RTT %v", c.RTT)
	case c.Rate < 0:
		return fmt.Errorf("wan: negative rate %d", c.Rate)
	case !(c.Loss >= 0 && c.Loss <= 1):
		return fmt.Errorf("wan: loss %v not in [0, 1]", c.Loss)
	case c.Buffer < 0:
		return fmt.Errorf("wan: negative buffer %d", c.Buffer)
	}
	return nil
}

// Stats counts what a Proxy has done so far.
type Stats struct {
	Conns      int64 // connections accepted
	Active     int64 // connections open now
	DialErrors int64 // connections refused because the target could not be reached
	BytesUp    int64 // bytes delivered client -> target
	BytesDown  int64 // bytes delivered target -> client
	Buffered   int64 // bytes held in the links now (all connections, both directions)
}

// Proxy is a running WAN emulator: it accepts TCP connections and relays
// each to the target through two emulated links.
type Proxy struct {
	cfg       Config // normalised: Buffer set
	chunkSize int
	target    string
	ln        net.Listener
	pool      sync.Pool
	ctx       context.Context
	cancel    context.CancelFunc

	mu    sync.Mutex
	conns map[*conn]struct{}
	wg    sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	conns64, active, dialErrors atomic.Int64
	up, down                    atomic.Int64
	buffered, peak              atomic.Int64
	upClock, downClock          pacer // the link's clocks, when Shared
}

// pacer is a serialisation clock: when the link finishes sending what it
// was given so far.
type pacer struct {
	mu     sync.Mutex
	serEnd time.Time
}

// next reserves the link for n bytes from start on, and returns when they
// are through.
func (pc *pacer) next(start time.Time, n int, rate int64) time.Time {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.serEnd.After(start) {
		start = pc.serEnd
	}
	end := start
	if rate > 0 {
		end = start.Add(time.Duration(int64(n) * 8 * int64(time.Second) / rate))
	}
	pc.serEnd = end
	return end
}

// Listen starts a proxy on listenAddr (host:port, port 0 for any) relaying
// to target through links described by cfg.
func Listen(listenAddr, target string, cfg Config) (*Proxy, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if target == "" {
		return nil, errors.New("wan: no target address")
	}
	if cfg.Buffer == 0 {
		cfg.Buffer = autoBuffer(cfg)
	}
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, fmt.Errorf("wan: %w", err)
	}
	p := &Proxy{
		cfg:       cfg,
		chunkSize: chunkSize(cfg),
		target:    target,
		ln:        ln,
		conns:     make(map[*conn]struct{}),
	}
	p.pool.New = func() any { b := make([]byte, p.chunkSize); return &b }
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Config returns the link configuration in effect (Buffer filled in).
func (p *Proxy) Config() Config { return p.cfg }

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	return Stats{
		Conns:      p.conns64.Load(),
		Active:     p.active.Load(),
		DialErrors: p.dialErrors.Load(),
		BytesUp:    p.up.Load(),
		BytesDown:  p.down.Load(),
		Buffered:   p.buffered.Load(),
	}
}

// Close stops the listener, closes every connection (dropping what the
// links hold) and waits for all of the proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		p.closeErr = p.ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.abort()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p.closeErr
}

func (p *Proxy) notePeak(n int64) {
	for {
		old := p.peak.Load()
		if n <= old || p.peak.CompareAndSwap(old, n) {
			return
		}
	}
}

// peakBuffered is the most bytes one link has held at once (tests).
func (p *Proxy) peakBuffered() int64 { return p.peak.Load() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	var backoff time.Duration
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off and retry.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
				return
			}
			continue
		}
		backoff = 0
		p.conns64.Add(1)
		p.wg.Add(1)
		go p.serve(nc)
	}
}

// conn is one proxied connection.
type conn struct {
	done     chan struct{}
	wg       sync.WaitGroup
	halfDone atomic.Int32 // directions that finished with a half-close

	mu             sync.Mutex
	closed         bool
	client, server net.Conn
}

// abort closes both sockets and stops all four goroutines.
func (c *conn) abort() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	close(c.done)
	c.client.Close()
	if c.server != nil {
		c.server.Close()
	}
}

// setServer records the dialled socket; false if c was aborted meanwhile.
func (c *conn) setServer(s net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.server = s
	return true
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	c := &conn{client: client, done: make(chan struct{})}
	p.mu.Lock()
	if p.ctx.Err() != nil {
		p.mu.Unlock()
		client.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	p.active.Add(1)
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		p.active.Add(-1)
	}()

	ctx, cancel := context.WithTimeout(p.ctx, dialTimeout)
	var d net.Dialer
	server, err := d.DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil {
		if p.ctx.Err() == nil {
			p.dialErrors.Add(1)
		}
		c.abort()
		return
	}
	if !c.setServer(server) { // Close ran while we dialled
		server.Close()
		return
	}

	up := newLink(p, c, client, server, &p.up, &p.upClock)
	down := newLink(p, c, server, client, &p.down, &p.downClock)
	c.wg.Add(4)
	go up.read()
	go up.write()
	go down.read()
	go down.write()
	c.wg.Wait()
	c.abort()
	p.buffered.Add(-int64(up.used + down.used))
}
