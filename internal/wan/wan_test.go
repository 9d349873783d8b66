package wan

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// server is a test TCP server on 127.0.0.1 running handle per connection;
// close stops it and waits for every handler.
type server struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startServer(t testing.TB, handle func(net.Conn)) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer func() {
					c.Close()
					s.mu.Lock()
					delete(s.conns, c)
					s.mu.Unlock()
				}()
				handle(c)
			}()
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *server) addr() string { return s.ln.Addr().String() }

func (s *server) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// echo copies everything back and half-closes at EOF.
func echo(c net.Conn) {
	io.Copy(c, c)
	c.(*net.TCPConn).CloseWrite()
	io.Copy(io.Discard, c)
}

func startProxy(t testing.TB, target string, cfg Config) *Proxy {
	t.Helper()
	p, err := Listen("127.0.0.1:0", target, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t testing.TB, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// checkNoLeaks fails if goroutines stay above before for 3 s.
func checkNoLeaks(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutines: %d before, %d after\n%s", before, n, buf)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestParseRate(t *testing.T) {
	good := []struct {
		in   string
		want int64
	}{
		{"", 0},
		{"0", 0},
		{"unlimited", 0},
		{"0mbit", 0},
		{"100mbit", 100e6},
		{"100Mbit", 100e6},
		{"200Mbit/s", 200e6},
		{"1gbit", 1e9},
		{"1.5Gbit", 1.5e9},
		{"10kbit", 10e3},
		{"56k", 56e3},
		{"100M", 100e6},
		{"1234", 1234},
		{"1234bit/s", 1234},
		{"100mbps", 100e6},
		{"10MB/s", 80e6},
		{"10 MB/s", 80e6},
		{"1KiB/s", 8192},
		{"2MiB", 16 << 20},
		{"1GB/s", 8e9},
		{"512B", 4096},
		{" 50mbit ", 50e6},
	}
	for _, tc := range good {
		got, err := ParseRate(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	bad := []string{
		"fast", "mbit", "-5mbit", "10mb", "10Mb/s", "10b", "1.2.3mbit", "100 furlongs",
		"1e9", "100mbit/h", "99999999999999999999gbit", "0.1bit", ".", "10 mbit extra",
	}
	for _, in := range bad {
		if got, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %d, want an error", in, got)
		} else if !strings.Contains(err.Error(), "bad rate") {
			t.Errorf("ParseRate(%q): unclear error %v", in, err)
		}
	}
}

func TestFormatRate(t *testing.T) {
	for in, want := range map[int64]string{
		0: "unlimited", 100e6: "100 Mbit/s", 1.5e9: "1.5 Gbit/s", 56e3: "56 kbit/s", 300: "300 bit/s",
	} {
		if got := FormatRate(in); got != want {
			t.Errorf("FormatRate(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestListenBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{RTT: -time.Millisecond}, {Rate: -1}, {Loss: 1.5}, {Loss: -0.1}, {Buffer: -1},
	} {
		if p, err := Listen("127.0.0.1:0", "127.0.0.1:1", cfg); err == nil {
			p.Close()
			t.Errorf("Listen with %+v succeeded", cfg)
		}
	}
}

// TestRTT measures small ping-pongs through an echo server. A loaded
// machine adds scheduling latency the emulator cannot take back, so a round
// of 10 pings whose median is off is measured again (at most 3 rounds); no
// ping may ever be faster than the RTT.
func TestRTT(t *testing.T) {
	echoSrv := startServer(t, echo)
	for _, rtt := range []time.Duration{40 * time.Millisecond, 80 * time.Millisecond} {
		t.Run(rtt.String(), func(t *testing.T) {
			p := startProxy(t, echoSrv.addr(), Config{RTT: rtt, Rate: 100e6})
			c := dial(t, p.Addr())
			c.SetDeadline(time.Now().Add(10 * time.Second))
			ping := []byte("ping-pong-0123456789")
			buf := make([]byte, len(ping))
			var median time.Duration
			for round := 1; round <= 3; round++ {
				var rtts []time.Duration
				for range 10 {
					start := time.Now()
					if _, err := c.Write(ping); err != nil {
						t.Fatal(err)
					}
					if _, err := io.ReadFull(c, buf); err != nil {
						t.Fatal(err)
					}
					rtts = append(rtts, time.Since(start))
				}
				slices.Sort(rtts)
				median = rtts[len(rtts)/2]
				t.Logf("rtt %v, round %d: median %v, min %v, max %v", rtt, round, median, rtts[0], rtts[len(rtts)-1])
				if rtts[0] < rtt {
					t.Fatalf("a ping took %v, less than the RTT %v", rtts[0], rtt)
				}
				if median <= rtt+rtt/10 {
					return
				}
			}
			t.Errorf("median RTT %v, want %v ±10%%", median, rtt)
		})
	}
}

// TestThroughput streams bulk data one way and measures goodput at the
// receiver from its first byte to its last (which excludes the one-way
// delay and connection set-up).
func TestThroughput(t *testing.T) {
	const size = 16 << 20
	for _, tc := range []struct {
		name string
		rate int64
	}{{"100mbit", 100e6}, {"200mbit", 200e6}} {
		t.Run(tc.name, func(t *testing.T) {
			type result struct {
				bits float64
				dur  time.Duration
				n    int
				err  error
			}
			res := make(chan result, 1)
			sink := startServer(t, func(c net.Conn) {
				c.SetDeadline(time.Now().Add(20 * time.Second))
				buf := make([]byte, 256<<10)
				var first, last time.Time
				var n, after int
				for {
					m, err := c.Read(buf)
					if m > 0 {
						now := time.Now()
						if n == 0 {
							first = now
						} else {
							after += m
						}
						last = now
						n += m
					}
					if err != nil {
						if errors.Is(err, io.EOF) {
							err = nil
						}
						res <- result{float64(after) * 8, last.Sub(first), n, err}
						return
					}
				}
			})
			p := startProxy(t, sink.addr(), Config{RTT: 10 * time.Millisecond, Rate: tc.rate})
			c := dial(t, p.Addr())
			c.SetDeadline(time.Now().Add(20 * time.Second))
			data := make([]byte, size)
			if _, err := c.Write(data); err != nil {
				t.Fatal(err)
			}
			c.CloseWrite()
			r := <-res
			if r.err != nil || r.n != size {
				t.Fatalf("received %d of %d bytes: %v", r.n, size, r.err)
			}
			got := r.bits / r.dur.Seconds()
			ratio := got / float64(tc.rate)
			t.Logf("goodput %s over %v (%.3f of the cap), buffer %d", FormatRate(int64(got)), r.dur.Round(time.Millisecond), ratio, p.Config().Buffer)
			// The cap must hold; how close a loaded machine gets to it is
			// the bench's to measure (a starved sender falls short).
			if ratio > 1.1 || ratio < 0.5 {
				t.Errorf("goodput %s, want at most %s +10%% (and more than half of it)", FormatRate(int64(got)), FormatRate(tc.rate))
			}
			if s := p.Stats(); s.BytesUp != size || s.Conns != 1 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// TestIntegrity sends different random streams both ways at once over
// several connections and checks they arrive identical.
func TestIntegrity(t *testing.T) {
	const size = 2 << 20
	// The server sends its own stream while it checks the client's.
	peer := func(seed uint64) []byte {
		b := make([]byte, size)
		r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
		r.Read(b)
		return b
	}
	serverErrs := make(chan error, 16)
	srv := startServer(t, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(20 * time.Second))
		var hdr [1]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			serverErrs <- err
			return
		}
		want, out := peer(uint64(hdr[0])), peer(uint64(hdr[0])+100)
		done := make(chan error, 1)
		go func() {
			_, err := c.Write(out)
			c.(*net.TCPConn).CloseWrite()
			done <- err
		}()
		got, err := io.ReadAll(c)
		if err == nil && !bytes.Equal(got, want) {
			err = errors.New("server: client's stream corrupted")
		}
		if werr := <-done; err == nil {
			err = werr
		}
		serverErrs <- err
	})
	for _, cfg := range []Config{
		{},
		{RTT: 6 * time.Millisecond, Loss: 0.3},
		{RTT: 2 * time.Millisecond, Rate: 1e9, Buffer: 100 << 10},
	} {
		t.Run(fmt.Sprintf("rate=%d,rtt=%v,loss=%v", cfg.Rate, cfg.RTT, cfg.Loss), func(t *testing.T) {
			p := startProxy(t, srv.addr(), cfg)
			var wg sync.WaitGroup
			errs := make(chan error, 3)
			for i := range 3 {
				wg.Go(func() {
					c := dial(t, p.Addr())
					c.SetDeadline(time.Now().Add(20 * time.Second))
					seed := uint64(i + 1)
					done := make(chan error, 1)
					go func() {
						_, err := c.Write(append([]byte{byte(seed)}, peer(seed)...))
						c.CloseWrite()
						done <- err
					}()
					got, err := io.ReadAll(c)
					if err == nil && !bytes.Equal(got, peer(seed+100)) {
						err = errors.New("client: server's stream corrupted")
					}
					if werr := <-done; err == nil {
						err = werr
					}
					errs <- err
				})
			}
			wg.Wait()
			for range 3 {
				if err := <-errs; err != nil {
					t.Error(err)
				}
				if err := <-serverErrs; err != nil {
					t.Error(err)
				}
			}
			s := p.Stats()
			if s.BytesUp != 3*(size+1) || s.BytesDown != 3*size {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// TestBufferBound: the target stops reading, so the link fills up; it must
// never hold more than its bound, and the sender must be pushed back.
func TestBufferBound(t *testing.T) {
	release := make(chan struct{})
	srv := startServer(t, func(c net.Conn) {
		<-release // read nothing
	})
	defer close(release)
	for _, cfg := range []Config{
		{RTT: 20 * time.Millisecond, Rate: 100e6, Buffer: 256 << 10},
		{RTT: 20 * time.Millisecond, Rate: 100e6}, // auto
		{Buffer: 1 << 20}, // unlimited rate, no delay
	} {
		t.Run(fmt.Sprintf("rate=%d,buffer=%d", cfg.Rate, cfg.Buffer), func(t *testing.T) {
			p := startProxy(t, srv.addr(), cfg)
			bound := int64(p.Config().Buffer)
			c := dial(t, p.Addr())
			piece := make([]byte, 64<<10)
			var written int64
			for {
				c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
				n, err := c.Write(piece)
				written += int64(n)
				if err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatal(err)
					}
					break // the sender is blocked: back-pressure works
				}
				if written > 256<<20 {
					t.Fatalf("wrote %d bytes into a receiver that does not read", written)
				}
			}
			s := p.Stats()
			t.Logf("bound %d: sender blocked after %d bytes, link holds %d, peak %d", bound, written, s.Buffered, p.peakBuffered())
			if peak := p.peakBuffered(); peak > bound {
				t.Errorf("link held %d bytes, bound %d", peak, bound)
			}
			if s.Buffered > bound || s.Buffered < bound-int64(p.chunkSize) {
				t.Errorf("link holds %d bytes when full, want (%d-%d, %d]", s.Buffered, bound, p.chunkSize, bound)
			}
			p.Close()
			if s := p.Stats(); s.Buffered != 0 || s.Active != 0 {
				t.Errorf("after Close: %+v", s)
			}
		})
	}
}

// TestHalfClose: the server answers only after the client's EOF, so the
// answer proves the EOF came through after all the data.
func TestHalfClose(t *testing.T) {
	before := runtime.NumGoroutine()
	srv := startServer(t, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		n, err := io.Copy(io.Discard, c)
		if err != nil {
			return
		}
		c.Write([]byte(strings.Repeat("x", int(n%1000)) + "done"))
		// handler return closes c fully
	})
	p := startProxy(t, srv.addr(), Config{RTT: 20 * time.Millisecond, Rate: 100e6})
	c := dial(t, p.Addr())
	c.SetDeadline(time.Now().Add(10 * time.Second))
	const n = 1<<20 + 123
	if _, err := c.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Repeat("x", n%1000) + "done"; string(got) != want {
		t.Fatalf("got %d bytes %q..., want %d", len(got), got[:min(len(got), 10)], len(want))
	}
	// Both directions finished: the proxy closes the connection by itself.
	deadline := time.Now().Add(2 * time.Second)
	for p.Stats().Active != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("connection still open: %+v", p.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.Close()
	p.Close()
	srv.close()
	checkNoLeaks(t, before)
}

// TestClose closes the proxy under busy, idle and stalled connections.
func TestClose(t *testing.T) {
	before := runtime.NumGoroutine()
	srv := startServer(t, echo)
	release := make(chan struct{})
	stall := startServer(t, func(c net.Conn) { io.Copy(io.Discard, io.LimitReader(c, 1)); <-release })
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // runs before stall's cleanup
	p := startProxy(t, srv.addr(), Config{RTT: 30 * time.Millisecond, Rate: 50e6})
	ps := startProxy(t, stall.addr(), Config{RTT: 30 * time.Millisecond, Rate: 50e6, Buffer: 64 << 10})

	var clients []*net.TCPConn
	var wg sync.WaitGroup
	for i := range 4 {
		addr := p.Addr()
		if i == 3 {
			addr = ps.Addr()
		}
		c := dial(t, addr)
		clients = append(clients, c)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if i == 0 {
			continue // idle
		}
		wg.Go(func() { // busy writers; they fail when the proxy closes
			buf := make([]byte, 32<<10)
			for {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		})
		wg.Go(func() { io.Copy(io.Discard, c) })
	}
	time.Sleep(200 * time.Millisecond)
	if s := p.Stats(); s.Active != 3 || s.BytesDown == 0 {
		t.Fatalf("before Close: %+v", s)
	}
	start := time.Now()
	p.Close()
	ps.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	// The idle client sees the close too.
	if _, err := clients[0].Read(make([]byte, 1)); err == nil {
		t.Error("idle client: read succeeded after Close")
	}
	wg.Wait()
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Error("proxy still accepting after Close")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for _, c := range clients {
		c.Close()
	}
	unblock()
	srv.close()
	stall.close()
	checkNoLeaks(t, before)
}

// TestDialFailure: an unreachable target closes the client's connection.
func TestDialFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := startProxy(t, dead, Config{RTT: 10 * time.Millisecond})
	c := dial(t, p.Addr())
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes from a proxy with no target", n)
	}
	if s := p.Stats(); s.DialErrors != 1 {
		t.Errorf("stats %+v", s)
	}
}

// BenchmarkProxyThroughput streams one way through an unlimited, zero-delay
// proxy: the emulator's own overhead.
func BenchmarkProxyThroughput(b *testing.B) {
	done := make(chan int64, 1)
	sink := startServer(b, func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		done <- n
	})
	p := startProxy(b, sink.addr(), Config{})
	c := dial(b, p.Addr())
	buf := make([]byte, 64<<10)
	b.SetBytes(int64(len(buf)))
	var sent int64
	for b.Loop() {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		sent += int64(len(buf))
	}
	c.CloseWrite()
	if n := <-done; n != sent {
		b.Fatalf("sink got %d bytes, sent %d", n, sent)
	}
}

// BenchmarkDirectThroughput is the same stream without the proxy, as a
// baseline for BenchmarkProxyThroughput.
func BenchmarkDirectThroughput(b *testing.B) {
	done := make(chan int64, 1)
	sink := startServer(b, func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		done <- n
	})
	c := dial(b, sink.addr())
	buf := make([]byte, 64<<10)
	b.SetBytes(int64(len(buf)))
	var sent int64
	for b.Loop() {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		sent += int64(len(buf))
	}
	c.CloseWrite()
	if n := <-done; n != sent {
		b.Fatalf("sink got %d bytes, sent %d", n, sent)
	}
}

// TestSharedRate: with Shared, four connections together get the link's
// rate (within 10%), not four times it.
func TestSharedRate(t *testing.T) {
	const size = 4 << 20
	const rate = 200e6
	var total atomic.Int64
	sink := startServer(t, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(20 * time.Second))
		n, _ := io.Copy(io.Discard, c)
		total.Add(n)
	})
	p := startProxy(t, sink.addr(), Config{RTT: 4 * time.Millisecond, Rate: rate, Shared: true})
	var wg sync.WaitGroup
	t0 := time.Now()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dial(t, p.Addr())
			c.SetDeadline(time.Now().Add(20 * time.Second))
			c.Write(make([]byte, size))
			c.CloseWrite()
			io.Copy(io.Discard, c)
			c.Close()
		}()
	}
	wg.Wait()
	got := float64(4*size*8) / time.Since(t0).Seconds()
	t.Logf("four connections together: %s (cap %s)", FormatRate(int64(got)), FormatRate(rate))
	if got > rate*1.1 || got < rate*0.8 {
		t.Errorf("four connections moved %s through a shared link of %s", FormatRate(int64(got)), FormatRate(rate))
	}
}
