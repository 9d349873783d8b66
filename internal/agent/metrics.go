package agent

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"pando.dev/pando/internal/metricsrv"
	"pando.dev/pando/internal/vfs"
)

// collector exposes the agent's figures in the Prometheus format: RPCs by
// kind, cache hits and misses, and how stale each share's answers may be.
// It reads them at scrape time, so it keeps no state of its own.
type collector struct{ a *Agent }

var (
	descInfo      = prometheus.NewDesc("pando_agent_info", "The mount's consistency and write modes.", []string{"mount", "consistency", "write"}, nil)
	descHits      = prometheus.NewDesc("pando_cache_hits_total", "Reads served from the cache.", nil, nil)
	descFetched   = prometheus.NewDesc("pando_cache_fetched_bytes_total", "Bytes fetched from shares into the cache.", nil, nil)
	descAround    = prometheus.NewDesc("pando_cache_written_around_bytes_total", "Bytes of blocks written to the cache's disk around the page cache (O_DIRECT): a file the kernel will read directly, found only on disk, is read at disk speed.", nil, nil)
	descPreloaded = prometheus.NewDesc("pando_cache_preloaded_bytes_total", "Bytes of large cached files loaded back into the page cache once whole, for the kernel to read directly.", nil, nil)
	descReads     = prometheus.NewDesc("pando_reads_total", "The kernel's read requests the agent answered (a passthrough read sends none).", nil, nil)
	descReadBytes = prometheus.NewDesc("pando_read_bytes_total", "Bytes the agent sent in answer to the kernel's read requests.", nil, nil)
	descOpens     = prometheus.NewDesc("pando_opens_total", "Opens of regular files, by how their reads are served: passthrough (by the kernel from the cache's data file), direct or cached (by the agent).", []string{"mode"}, nil)
	descDisk      = prometheus.NewDesc("pando_cache_disk_bytes", "Bytes the cache holds on disk.", nil, nil)
	descMemory    = prometheus.NewDesc("pando_cache_memory_bytes", "Bytes the cache holds in memory.", nil, nil)
	descConfirmed = prometheus.NewDesc("pando_share_confirmed_age_seconds",
		"Per share under poll or callback: how long ago the share last confirmed this agent's cache (its last successful poll or long poll).", []string{"share"}, nil)
	descBound = prometheus.NewDesc("pando_stale_bound_seconds",
		"How old an answer of this mount may be under its default consistency mode: D for window and poll (plus one poll), 0 for strict and callback, +Inf for immutable.", nil, nil)
	descShareUp = prometheus.NewDesc("pando_share_up",
		"Per share used: 1 while it answers, 0 while it is marked unreachable (cached data is then served stale unless --offline=fail).", []string{"share"}, nil)
	descShareSince = prometheus.NewDesc("pando_share_state_seconds",
		"Per share used: how long it has been in its present state (up or unreachable).", []string{"share"}, nil)
	descShareOutages = prometheus.NewDesc("pando_share_outages_total", "Per share used: times it was marked unreachable.", []string{"share"}, nil)
	descShareRTT     = prometheus.NewDesc("pando_share_rtt_seconds", "Per share used: the smoothed round trip of its pings, which its deadlines follow.", []string{"share"}, nil)
	descUnsent       = prometheus.NewDesc("pando_unsent_files", "Files whose data has not reached their share yet (kept back under a write delegation included), by the cause of the last failure to send them (an errno name such as ENOSPC or EHOSTUNREACH; none: no send failed yet).", []string{"cause"}, nil)
	descUnsentBytes  = prometheus.NewDesc("pando_unsent_bytes", "Bytes of cache blocks holding data not yet at its share, of the files pando_unsent_files counts.", nil, nil)
	descConflicts    = prometheus.NewDesc("pando_conflicts_total", "Conflicts met since the agent started (local versions kept beside the files).", nil, nil)
	descDelegs       = prometheus.NewDesc("pando_write_delegations", "Write delegations held now.", nil, nil)
	descGranted      = prometheus.NewDesc("pando_write_delegations_granted_total", "Write delegations granted.", nil, nil)
	descRecalls      = prometheus.NewDesc("pando_write_delegation_recalls_total", "Write delegations the shares recalled.", nil, nil)
	descLost         = prometheus.NewDesc("pando_write_delegations_lost_total", "Write delegations lost while data was kept back.", nil, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	o := a.v.Options()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(descInfo, 1, a.cfg.MountPoint, o.Consistency.String(), o.Write.String())
	for op, n := range a.rt.Counts() {
		counter(metricsrv.RPCs, float64(n), op)
	}
	cs := a.cache.Stats()
	counter(descHits, float64(cs.Hits))
	counter(metricsrv.CacheMisses, float64(cs.Misses))
	counter(descFetched, float64(cs.BytesFetched))
	counter(descPreloaded, float64(cs.Preloaded))
	counter(descAround, float64(cs.WrittenAround))
	opens := a.m.Opens()
	counter(descOpens, float64(opens.Passthrough), "passthrough")
	counter(descOpens, float64(opens.Direct), "direct")
	counter(descOpens, float64(opens.Cached), "cached")
	counter(descReads, float64(opens.Reads))
	counter(descReadBytes, float64(opens.ReadBytes))
	gauge(descDisk, float64(cs.DiskBytes))
	gauge(descMemory, float64(cs.MemoryBytes))
	for share, d := range a.v.Staleness() {
		if d >= 0 {
			gauge(descConfirmed, d.Seconds(), share)
		}
	}
	for _, s := range a.v.Shares() {
		up := 0.0
		if s.Up {
			up = 1
		}
		gauge(descShareUp, up, s.Share)
		if !s.Since.IsZero() {
			gauge(descShareSince, time.Since(s.Since).Seconds(), s.Share)
		}
		counter(descShareOutages, float64(s.Outages), s.Share)
		gauge(descShareRTT, s.RTT.Seconds(), s.Share)
	}
	bound := math.Inf(1)
	if d, ok := o.Consistency.Rule().Bound(); ok {
		bound = d.Seconds()
	}
	gauge(descBound, bound)
	causes := map[string]int{}
	var unsentBytes int64
	for _, u := range a.v.UnsentFiles() {
		cause := u.Cause
		if cause == "" {
			cause = "none"
		}
		causes[cause]++
		unsentBytes += u.Bytes
	}
	for cause, n := range causes {
		gauge(descUnsent, float64(n), cause)
	}
	gauge(descUnsentBytes, float64(unsentBytes))
	counter(descConflicts, float64(len(a.v.Conflicts()))) // they only add up
	collectController(a.cl.ControllerStatus(), gauge, counter)
	if o.Write == vfs.WriteBack {
		d := a.v.Delegations()
		gauge(descDelegs, float64(d.Held))
		counter(descGranted, float64(d.Granted))
		counter(descRecalls, float64(d.Recalls))
		counter(descLost, float64(d.Lost))
	}
}
