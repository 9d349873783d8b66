package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
	"pando.dev/pando/internal/metricsrv"
)

// collector exposes a gateway's figures in the Prometheus format, read
// at scrape time: requests by outcome, users served, and the RPCs and
// caches of all its users together.
type collector struct{ g *Gateway }

var (
	descGwInfo     = prometheus.NewDesc("pando_gateway_info", "The gateway's identity, consistency and write modes.", []string{"gateway", "consistency", "write"}, nil)
	descGwRequests = prometheus.NewDesc("pando_gateway_requests_total", "Requests served, by outcome: all, refused (a right missing) or unauthenticated.", []string{"outcome"}, nil)
	descGwUsers    = prometheus.NewDesc("pando_gateway_users", "Users with a file system open at the gateway.", nil, nil)
	descGwDirect   = prometheus.NewDesc("pando_gateway_direct_opens_total", "Opens read straight from the cache's data file.", nil, nil)
	descGwNFSBad   = prometheus.NewDesc("pando_gateway_nfs_bad_calls_total", "NFS calls refused as malformed (their connection closed).", nil, nil)
	descGwNFSConns = prometheus.NewDesc("pando_gateway_nfs_connections_refused_total", "NFS connections refused: from a network not allowed, or past the bound.", nil, nil)
	descGwNFSBytes = prometheus.NewDesc("pando_gateway_nfs_bytes_total", "Bytes read and written through NFS.", []string{"dir"}, nil)
	descGwHits     = prometheus.NewDesc("pando_cache_hits_total", "Reads served from the users' caches.", nil, nil)
	descGwFetched  = prometheus.NewDesc("pando_cache_fetched_bytes_total", "Bytes fetched from shares into the users' caches.", nil, nil)
	descGwDisk     = prometheus.NewDesc("pando_cache_disk_bytes", "Bytes the users' caches hold on disk.", nil, nil)
	descGwMemory   = prometheus.NewDesc("pando_cache_memory_bytes", "Bytes the users' caches hold in memory.", nil, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.g.Stats()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(descGwInfo, 1, c.g.id.String(), c.g.cfg.VFS.Consistency.String(), c.g.cfg.VFS.Write.String())
	counter(descGwRequests, float64(st.Requests), "all")
	counter(descGwRequests, float64(st.Refused), "refused")
	counter(descGwRequests, float64(st.Unauthenticated), "unauthenticated")
	gauge(descGwUsers, float64(st.Users))
	counter(descGwDirect, float64(st.Direct))
	counter(descGwNFSBad, float64(st.NFS.BadCalls))
	counter(descGwNFSConns, float64(st.NFS.ConnsRefused))
	counter(descGwNFSBytes, float64(st.NFS.BytesRead), "read")
	counter(descGwNFSBytes, float64(st.NFS.BytesWritten), "written")
	for op, n := range st.RPCs {
		counter(metricsrv.RPCs, float64(n), op)
	}
	counter(descGwHits, float64(st.Cache.Hits))
	counter(metricsrv.CacheMisses, float64(st.Cache.Misses))
	counter(descGwFetched, float64(st.Cache.BytesFetched))
	gauge(descGwDisk, float64(st.Cache.DiskBytes))
	gauge(descGwMemory, float64(st.Cache.MemoryBytes))
}

// ServeMetrics serves the gateway's metrics at http://addr/metrics until
// the server returned is closed.
func (g *Gateway) ServeMetrics(addr string) (*metricsrv.Server, error) {
	return metricsrv.Serve(addr, metricsrv.Handler(collector{g}))
}
