package relay

import (
	"errors"
	"io"
	"net"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons a relay refuses a request, as its metrics and log name them.
const (
	reasonUnknown    = "unknown-server" // no server of that name is registered
	reasonServerBusy = "server-limit"   // the server holds Limits.PerServer connections
	reasonClientBusy = "client-limit"   // the client address holds Limits.PerClient
	reasonNoAnswer   = "no-answer"      // the server did not dial back in time
	reasonBadRequest = "bad-request"    // a malformed request, a stale nonce, a failed handshake
	reasonUntrusted  = "untrusted-ca"   // a server certificate of a CA the relay does not trust
	reasonWrongName  = "wrong-name"     // a server asked to register under another's name
)

// ServerStats are one registered server's figures at a relay.
type ServerStats struct {
	Registered bool
	// Conns counts the connections spliced to it; Active those open now.
	Conns, Active int64
	// Refused counts the requests for it that were refused, by reason.
	Refused map[string]int64
	// ToServer and ToClient count the bytes spliced each way.
	ToServer, ToClient int64
}

type serverStats struct {
	registered    atomic.Bool
	conns, active atomic.Int64
	up, down      atomic.Int64
	mu            sync.Mutex
	refused       map[string]int64
}

type stats struct {
	mu      sync.Mutex
	servers map[string]*serverStats // "" holds refusals that name no server
}

func (s *stats) init() { s.servers = map[string]*serverStats{} }

func (s *stats) server(name string) *serverStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.servers[name]
	if st == nil {
		st = &serverStats{refused: map[string]int64{}}
		s.servers[name] = st
	}
	return st
}

func (s *stats) refused(server, reason string) {
	st := s.server(server)
	st.mu.Lock()
	st.refused[reason]++
	st.mu.Unlock()
}

// Stats returns every server's figures, by name; "" holds the refusals
// that name no registered server (unknown names, malformed requests,
// clients over their limit).
func (s *Server) Stats() map[string]ServerStats {
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	out := make(map[string]ServerStats, len(s.stats.servers))
	for name, st := range s.stats.servers {
		st.mu.Lock()
		ref := make(map[string]int64, len(st.refused))
		for k, v := range st.refused {
			ref[k] = v
		}
		st.mu.Unlock()
		out[name] = ServerStats{Registered: st.registered.Load(), Conns: st.conns.Load(), Active: st.active.Load(),
			Refused: ref, ToServer: st.up.Load(), ToClient: st.down.Load()}
	}
	return out
}

var (
	descConns    = prometheus.NewDesc("pando_relay_connections_total", "Connections spliced to a server through the relay.", []string{"server"}, nil)
	descActive   = prometheus.NewDesc("pando_relay_connections_active", "Connections spliced to a server now.", []string{"server"}, nil)
	descRefused  = prometheus.NewDesc("pando_relay_refusals_total", "Requests the relay refused, by server (empty: none named or known) and reason.", []string{"server", "reason"}, nil)
	descBytes    = prometheus.NewDesc("pando_relay_bytes_total", "Bytes spliced, by server and direction (to_server, to_client).", []string{"server", "direction"}, nil)
	descRegister = prometheus.NewDesc("pando_relay_server_registered", "1 while the server holds a control connection to the relay.", []string{"server"}, nil)
)

// Describe implements prometheus.Collector.
func (s *Server) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConns, descActive, descRefused, descBytes, descRegister} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *Server) Collect(ch chan<- prometheus.Metric) {
	all := s.Stats()
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st := all[n]
		for reason, v := range st.Refused {
			ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(v), n, reason)
		}
		if n == "" {
			continue
		}
		reg := 0.0
		if st.Registered {
			reg = 1
		}
		ch <- prometheus.MustNewConstMetric(descRegister, prometheus.GaugeValue, reg, n)
		ch <- prometheus.MustNewConstMetric(descConns, prometheus.CounterValue, float64(st.Conns), n)
		ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, float64(st.Active), n)
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(st.ToServer), n, "to_server")
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(st.ToClient), n, "to_client")
	}
}

var _ prometheus.Collector = (*Server)(nil)

// splice copies both ways between a client and a server until one side
// closes or no byte moved either way for idle, and returns the bytes
// copied each way. Between two TCP connections the kernel moves the
// bytes (splice(2)): the relay never holds them in its own memory.
func splice(client, server net.Conn, idle time.Duration, up, down *atomic.Int64) (toServer, toClient int64) {
	var last atomic.Int64 // when a byte last moved, either way (unix ns)
	last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); toServer = pump(server, client, idle, &last, up) }()
	go func() { defer wg.Done(); toClient = pump(client, server, idle, &last, down) }()
	wg.Wait()
	return toServer, toClient
}

// spliceChunk is how much one copy moves before the idle clock is read.
const spliceChunk = 1 << 20

// pump copies src to dst in chunks, each under a read deadline of idle;
// a deadline that passes ends the copy only when the other direction was
// idle too. When it ends, both connections are closed, so that the other
// direction ends as well.
func pump(dst, src net.Conn, idle time.Duration, last *atomic.Int64, count *atomic.Int64) int64 {
	defer dst.Close()
	defer src.Close()
	var total int64
	for {
		_ = src.SetReadDeadline(time.Now().Add(idle))
		n, err := io.CopyN(dst, src, spliceChunk)
		total += n
		count.Add(n)
		if n > 0 {
			last.Store(time.Now().UnixNano())
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && time.Since(time.Unix(0, last.Load())) < idle {
			continue // the other way is busy: a download's request side is quiet
		}
		return total // an end (TLS ends with close_notify: no half-close to pass on)
	}
}
