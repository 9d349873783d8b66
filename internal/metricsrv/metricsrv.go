// Package metricsrv serves a process's Prometheus metrics over HTTP: the
// agent's, a gateway's and a controller's alike; and it declares the
// metrics more than one of them exports, once.
package metricsrv

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Descriptors that the agent and a gateway both export, with the same
// meaning: one declaration, so that a dashboard reads either alike.
var (
	RPCs        = prometheus.NewDesc("pando_rpcs_total", "Requests sent to controllers and shares, by kind.", []string{"op"}, nil)
	CacheMisses = prometheus.NewDesc("pando_cache_misses_total", "Reads that fetched from a share.", nil, nil)
)

// Handler serves what c collects, in the Prometheus text format.
func Handler(c prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// Server serves metrics until it is closed.
type Server struct {
	*http.Server
	addr net.Addr
}

// Addr is where it listens.
func (s *Server) Addr() net.Addr { return s.addr }

// Serve serves h at http://addr/metrics until the server is closed.
func Serve(addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot serve metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return &Server{Server: srv, addr: ln.Addr()}, nil
}
