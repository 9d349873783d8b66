package wan

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// chunk is one read from the sending socket, scheduled for delivery.
type chunk struct {
	at  time.Time // when it leaves the link (is written to the receiver)
	buf *[]byte   // pooled buffer; (*buf)[:n] holds the data
	n   int
}

// link is one direction of one proxied connection: a reader goroutine moves
// bytes from src into a bounded, time-stamped queue, and a writer goroutine
// delivers them to dst when they are due.
type link struct {
	p    *Proxy
	c    *conn
	src  net.Conn
	dst  net.Conn
	sent *atomic.Int64 // Proxy byte counter for this direction

	clock       *pacer    // serialisation: this connection's, or the link's
	lastDeliver time.Time // deliverAt of the last chunk (order is kept; reader only)

	mu       sync.Mutex
	q        []chunk // FIFO, deliverAt non-decreasing
	head     int     // q[head:] is pending
	used     int     // bytes in q[head:] plus bytes being written
	eof      bool    // src reached EOF; dst gets CloseWrite once q drains
	notEmpty chan struct{}
	notFull  chan struct{}
}

func newLink(p *Proxy, c *conn, src, dst net.Conn, sent *atomic.Int64, shared *pacer) *link {
	clock := &pacer{}
	if p.cfg.Shared {
		clock = shared
	}
	return &link{
		p: p, c: c, src: src, dst: dst, sent: sent, clock: clock,
		notEmpty: make(chan struct{}, 1),
		notFull:  make(chan struct{}, 1),
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// schedule returns when a chunk of n bytes read at time t leaves the link.
func (l *link) schedule(t time.Time, n int) time.Time {
	cfg := &l.p.cfg
	at := l.clock.next(t.Add(cfg.RTT/2), n, cfg.Rate)
	if cfg.Loss > 0 && rand.Float64() < cfg.Loss {
		// "Lost": the retransmission arrives one RTT later. The link keeps
		// serialising what follows (as TCP with SACK does), but in-order
		// delivery holds everything behind it.
		at = at.Add(cfg.RTT)
	}
	if at.Before(l.lastDeliver) {
		at = l.lastDeliver
	}
	l.lastDeliver = at
	return at
}

// read is the reader goroutine.
func (l *link) read() {
	defer l.c.wg.Done()
	size := l.p.chunkSize
	for {
		// Wait for room for a whole chunk, so the bound is never exceeded.
		l.mu.Lock()
		for l.used+size > l.p.cfg.Buffer {
			l.mu.Unlock()
			select {
			case <-l.notFull:
			case <-l.c.done:
				return
			}
			l.mu.Lock()
		}
		l.mu.Unlock()

		bp := l.p.pool.Get().(*[]byte)
		n, err := l.src.Read((*bp)[:size])
		if n > 0 {
			at := l.schedule(time.Now(), n)
			l.mu.Lock()
			l.q = append(l.q, chunk{at: at, buf: bp, n: n})
			l.used += n
			l.p.buffered.Add(int64(n))
			l.p.notePeak(int64(l.used))
			l.mu.Unlock()
			signal(l.notEmpty)
		} else {
			l.p.pool.Put(bp)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				l.mu.Lock()
				l.eof = true
				l.mu.Unlock()
				signal(l.notEmpty)
			} else {
				l.c.abort()
			}
			return
		}
	}
}

// write is the writer goroutine.
func (l *link) write() {
	defer l.c.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var (
		bufs  net.Buffers
		pools []*[]byte
	)
	for {
		l.mu.Lock()
		for l.head == len(l.q) {
			if l.eof {
				l.mu.Unlock()
				l.finish()
				return
			}
			l.mu.Unlock()
			select {
			case <-l.notEmpty:
			case <-l.c.done:
				return
			}
			l.mu.Lock()
		}
		at := l.q[l.head].at
		l.mu.Unlock()

		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-l.c.done:
				return
			}
		}

		// Take every chunk that is due (at least the head) and write them
		// with one writev.
		now := time.Now()
		bufs, pools = bufs[:0], pools[:0]
		total := 0
		l.mu.Lock()
		for l.head < len(l.q) && (len(pools) == 0 || !l.q[l.head].at.After(now)) && len(pools) < 64 {
			ch := l.q[l.head]
			l.q[l.head] = chunk{}
			l.head++
			bufs = append(bufs, (*ch.buf)[:ch.n])
			pools = append(pools, ch.buf)
			total += ch.n
		}
		if l.head == len(l.q) {
			l.q, l.head = l.q[:0], 0
		} else if l.head > 1024 && l.head*2 > len(l.q) {
			n := copy(l.q, l.q[l.head:])
			clear(l.q[n:])
			l.q, l.head = l.q[:n], 0
		}
		l.mu.Unlock()

		wbufs := bufs // WriteTo consumes its receiver
		_, err := wbufs.WriteTo(l.dst)
		for _, bp := range pools {
			l.p.pool.Put(bp)
		}
		clear(pools)
		l.mu.Lock()
		l.used -= total
		l.p.buffered.Add(-int64(total))
		l.mu.Unlock()
		signal(l.notFull)
		if err != nil {
			l.c.abort()
			return
		}
		l.sent.Add(int64(total))
	}
}

// finish propagates the half-close once everything before the EOF has been
// delivered.
func (l *link) finish() {
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := l.dst.(closeWriter); ok {
		if err := cw.CloseWrite(); err != nil {
			l.c.abort()
			return
		}
	} else {
		l.c.abort()
		return
	}
	if l.c.halfDone.Add(1) == 2 {
		l.c.abort() // both directions finished: close both sockets
	}
}

// pending returns the bytes this link holds (tests).
func (l *link) pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.used
}
