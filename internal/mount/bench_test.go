package mount_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/agent"
	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/mount"
	"pando.dev/pando/internal/procs"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wan"
	"pando.dev/pando/internal/wire"
)

// startAgent mounts the domain's namespace in-process.
func startAgent(tb testing.TB, d *testenv.Domain, opts vfs.Options, co cache.Options, streams ...int) *agent.Agent {
	st := 0
	if len(streams) > 0 {
		st = streams[0]
	}
	return startAgentWith(tb, d, agent.Config{VFS: opts, Cache: co, Streams: st})
}

// startAgentWith starts an agent with cfg (its client, mount point and
// cache directory filled in).
func startAgentWith(tb testing.TB, d *testenv.Domain, cfg agent.Config) *agent.Agent {
	tb.Helper()
	dir := tb.TempDir()
	mnt := filepath.Join(dir, "mnt")
	os.MkdirAll(mnt, 0o755)
	if cfg.Cache.Dir == "" {
		cfg.Cache.Dir = filepath.Join(dir, "cache")
	}
	cfg.Client, cfg.MountPoint = d.Admin, mnt
	a, err := agent.Start(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { a.Close() })
	return a
}

// loopback mounts go-fuse's loopback file system over dir: the reference
// the issue names (on this kernel it reads through FUSE passthrough).
func loopback(tb testing.TB, dir string) string {
	tb.Helper()
	mnt := tb.TempDir()
	root, err := fs.NewLoopbackRoot(dir)
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := fs.Mount(mnt, root, &fs.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Unmount() })
	return mnt
}

// waitOnDisk waits until a's cache holds n bytes on disk.
func waitOnDisk(tb testing.TB, a *agent.Agent, n int64) {
	tb.Helper()
	c := a.Cache()
	c.Sync()
	waitFor(tb, "bytes on disk", n, func() int64 { return c.Stats().DiskBytes })
}

// waitPreloaded waits until a's cache has loaded n bytes of its data
// files into the page cache (what it does once a file read through it is
// whole, after its last close).
func waitPreloaded(tb testing.TB, a *agent.Agent, n int64) {
	tb.Helper()
	c := a.Cache()
	waitFor(tb, "bytes preloaded", n, func() int64 { return c.Stats().Preloaded })
}

func waitFor(tb testing.TB, what string, n int64, got func() int64) {
	tb.Helper()
	for deadline := time.Now().Add(time.Minute); got() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("the cache has %d of %d %s after a minute", got(), n, what)
		}
	}
}

func readAll(tb testing.TB, p string) int64 { return readAllAdvised(tb, p, unix.FADV_NORMAL) }

// readAllAdvised reads p sequentially after advising the kernel how it
// will be read: FADV_RANDOM turns the kernel's read-ahead off for it.
func readAllAdvised(tb testing.TB, p string, advice int) int64 {
	tb.Helper()
	f, err := os.Open(p)
	if err != nil {
		tb.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, advice); err != nil {
		tb.Fatal(err)
	}
	return readFile(tb, f)
}

// readFile reads f to its end and closes it.
func readFile(tb testing.TB, f *os.File) int64 {
	tb.Helper()
	defer f.Close()
	// A plain loop of 1 MiB reads: io.CopyBuffer would hand the file to
	// io.Discard's ReadFrom, which reads 8 KiB at a time.
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, err := f.Read(buf)
		n += int64(k)
		if err == io.EOF {
			return n
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
}

const gib = 1 << 30

func idleTicks() int64 {
	b, _ := os.ReadFile("/proc/stat")
	var u, n, s, i, w int64
	fmt.Sscanf(string(b), "cpu %d %d %d %d %d", &u, &n, &s, &i, &w)
	return i + w
}

// cpuMeter adds up the CPU time the process uses (the share, the agent
// and the reader all run in it) and the host's idle time, between start
// and stop: on a host whose cores are all busy, the throughput follows
// the CPU time per byte.
type cpuMeter struct {
	used, idle time.Duration
	last       time.Duration // wall time from the last start to stop
	t0         time.Time
	ru         unix.Rusage
	i0         int64
}

func (m *cpuMeter) start() {
	unix.Getrusage(unix.RUSAGE_SELF, &m.ru)
	m.i0 = idleTicks()
	m.t0 = time.Now()
}

func (m *cpuMeter) stop() {
	m.last = time.Since(m.t0)
	var end unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &end)
	m.used += time.Duration(end.Utime.Nano() - m.ru.Utime.Nano() + end.Stime.Nano() - m.ru.Stime.Nano())
	m.idle += time.Duration(idleTicks()-m.i0) * 10 * time.Millisecond
}

// report gives the CPU and idle time per GiB read.
func (m *cpuMeter) report(b *testing.B) {
	b.ReportMetric(m.used.Seconds()/float64(b.N), "cpu-s/GiB")
	b.ReportMetric(m.idle.Seconds()/float64(b.N), "idle-s/GiB")
}

// BenchmarkWarmRead: a second sequential read of a 1 GiB file through the
// mount, beside go-fuse's loopback file system reading the same local file.
func BenchmarkWarmRead(b *testing.B) {
	d := testenv.New(b, "bench")
	root := d.AddShare("data")
	testenv.MakeFile(b, filepath.Join(root, "big"), gib)
	b.Run("reference=go-fuse-loopback", func(b *testing.B) {
		defer procs.Own()()
		mnt := loopback(b, root)
		readAll(b, filepath.Join(mnt, "big"))
		b.SetBytes(gib)
		for b.Loop() {
			readAll(b, filepath.Join(mnt, "big"))
		}
	})
	b.Run("pando-warm", func(b *testing.B) {
		a := startAgent(b, d, vfs.Options{}, cache.Options{DiskBytes: 2 * gib})
		p := filepath.Join(a.Mount().Dir(), "bench", "data", "big")
		readAll(b, p)
		// Warm: the cache holds the file on disk and has loaded it into
		// the page cache, which it does after the last close of a file
		// it holds whole. A read right on the heels of the cold one
		// finds on disk the blocks the writer wrote around the page
		// cache when it fell behind (see BenchmarkReRead); from then on
		// the kernel reads the data file in memory.
		waitOnDisk(b, a, gib)
		waitPreloaded(b, a, gib)
		b.SetBytes(gib)
		for b.Loop() {
			readAll(b, p)
		}
	})
	// Without the kernel's page cache and without passthrough: what the
	// agent's own cache serves through FUSE (needs root to drop the page
	// cache).
	b.Run("pando-warm-agent-cache-only", func(b *testing.B) {
		a := startAgentWith(b, d, agent.Config{VFS: vfs.Options{}, Cache: cache.Options{DiskBytes: 2 * gib, MemoryBytes: 2 * gib}, NoPassthrough: true})
		p := filepath.Join(a.Mount().Dir(), "bench", "data", "big")
		readAll(b, p)
		b.SetBytes(gib)
		for b.Loop() {
			b.StopTimer()
			if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
				b.Skip("cannot drop the page cache:", err)
			}
			b.StartTimer()
			readAll(b, p)
		}
	})
}

var readAhead, streams = envInt("PANDO_BENCH_READAHEAD", 16), envInt("PANDO_BENCH_STREAMS", 2)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// BenchmarkColdRead: a first read through a fresh agent on loopback,
// beside the foundation's raw share read (the client library) of the
// same file; then both again, taking turns ("interleaved"), for their
// ratio on a machine whose speed drifts from one minute to the next.
func BenchmarkColdRead(b *testing.B) {
	d := testenv.New(b, "bench")
	root := d.AddShare("data")
	testenv.MakeFile(b, filepath.Join(root, "big"), gib)
	readAll(b, filepath.Join(root, "big")) // the share's page cache is warm for both
	b.Run("reference=raw-share-read", func(b *testing.B) {
		b.SetBytes(gib)
		var m cpuMeter
		for b.Loop() {
			coldRef(b, d, &m)
		}
		m.report(b)
	})
	b.Run("pando-cold", func(b *testing.B) {
		b.SetBytes(gib)
		var m cpuMeter
		for b.Loop() {
			coldPando(b, d, &m)
		}
		m.report(b)
	})
	b.Run("interleaved", func(b *testing.B) {
		var ref, pando cpuMeter
		var tr, tp time.Duration
		for b.Loop() {
			coldRef(b, d, &ref)
			coldPando(b, d, &pando)
			tr, tp = tr+ref.last, tp+pando.last
		}
		mbs := func(t time.Duration) float64 { return float64(b.N) * gib / 1e6 / t.Seconds() }
		b.ReportMetric(mbs(tr), "ref-MB/s")
		b.ReportMetric(mbs(tp), "pando-MB/s")
		b.ReportMetric(100*mbs(tp)/mbs(tr), "%of-ref")
		b.ReportMetric(ref.used.Seconds()/float64(b.N), "ref-cpu-s/GiB")
		b.ReportMetric(pando.used.Seconds()/float64(b.N), "pando-cpu-s/GiB")
	})
}

// coldRef reads the file once with the client library, as the share's raw
// read, adding its CPU time to m.
func coldRef(b *testing.B, d *testenv.Domain, m *cpuMeter) {
	defer procs.Own()() // as the client library runs: without an agent's spare Ps
	c := d.Client(d.Admin)
	ctx := context.Background()
	m.start()
	f, err := c.Open(ctx, "/bench/data/big", wire.OpenRead)
	if err != nil {
		b.Fatal(err)
	}
	if n, err := f.WriteTo(ctx, io.Discard); err != nil || n != gib {
		b.Fatal(n, err)
	}
	f.Close(ctx)
	m.stop()
}

// coldPando reads the file once through a fresh agent, timing (and adding
// to m) the read alone.
func coldPando(b *testing.B, d *testenv.Domain, m *cpuMeter) {
	b.StopTimer()
	a := startAgent(b, d, vfs.Options{ReadAhead: readAhead}, cache.Options{DiskBytes: 2 * gib}, streams)
	p := filepath.Join(a.Mount().Dir(), "bench", "data", "big")
	b.StartTimer()
	m.start()
	readAll(b, p)
	m.stop()
	b.StopTimer()
	a.Cache().Sync()
	b.ReportMetric(float64(a.Cache().Stats().DiskBytes)/gib*100, "%cached")
	a.Close()
	b.StartTimer()
}

// BenchmarkWANColdRead: a cold read of a 256 MiB file through a WAN
// emulator at 40 ms round trip and 200 Mbit/s, beside a reader that asks
// for one block at a time. One data stream, so the proxy's per-connection
// cap is the path's cap.
func BenchmarkWANColdRead(b *testing.B) {
	const size = 256 << 20
	d := testenv.New(b, "bench")
	shareAddr := testenv.FreePort(b)
	proxyAddr := testenv.FreePort(b)
	px, err := wan.Listen(proxyAddr, shareAddr, wan.Config{RTT: 40 * time.Millisecond, Rate: 200e6})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { px.Close() })
	root := d.AddShareAt("data", shareAddr, proxyAddr)
	testenv.MakeFile(b, filepath.Join(root, "big"), size)
	b.Logf("link: 40 ms RTT, 200 Mbit/s = %.1f MB/s", 200e6/8/1e6)
	for _, ra := range []int{1, 16} {
		name := "pando-cold-readahead=" + strconv.Itoa(ra)
		if ra == 1 {
			name = "reference=one-block-at-a-time"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				b.StopTimer()
				a := startAgent(b, d, vfs.Options{ReadAhead: ra}, cache.Options{}, 1)
				p := filepath.Join(a.Mount().Dir(), "bench", "data", "big")
				// The reference reads one block at a time: the
				// kernel's own read-ahead (raised on the mount) must
				// not put more in flight for it.
				advice := unix.FADV_NORMAL
				if ra == 1 {
					advice = unix.FADV_RANDOM
				}
				b.StartTimer()
				readAllAdvised(b, p, advice)
				b.StopTimer()
				a.Close()
				b.StartTimer()
			}
		})
	}
}

// BenchmarkWANWriteBack: the close of a 128 MiB file written through the
// mount (the write-back alone: the writes into the cache are not timed),
// through a WAN emulator at 40 ms round trip and 200 Mbit/s, beside the
// client library writing the same bytes (File.ReadFrom). One data stream.
func BenchmarkWANWriteBack(b *testing.B) {
	const size = 128 << 20
	d := testenv.New(b, "bench")
	shareAddr := testenv.FreePort(b)
	proxyAddr := testenv.FreePort(b)
	px, err := wan.Listen(proxyAddr, shareAddr, wan.Config{RTT: 40 * time.Millisecond, Rate: 200e6})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { px.Close() })
	d.AddShareAt("data", shareAddr, proxyAddr)
	b.Logf("link: 40 ms RTT, 200 Mbit/s = %.1f MB/s", 200e6/8/1e6)
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	b.Run("reference=client-write", func(b *testing.B) {
		defer procs.Own()()
		c, err := client.New(d.Admin, client.Options{Streams: 1})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		b.SetBytes(size)
		for b.Loop() {
			f, err := c.Create(ctx, "/bench/data/ref", wire.OpenWrite|wire.OpenTrunc, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			r := io.LimitReader(repeat(buf), size)
			if n, err := f.ReadFrom(ctx, r); err != nil || n != size {
				b.Fatal(n, err)
			}
			f.Close(ctx)
		}
	})
	b.Run("pando-close", func(b *testing.B) {
		a := startAgent(b, d, vfs.Options{}, cache.Options{}, 1)
		p := filepath.Join(a.Mount().Dir(), "bench", "data", "w")
		b.SetBytes(size)
		for b.Loop() {
			b.StopTimer()
			f, err := os.Create(p)
			if err != nil {
				b.Fatal(err)
			}
			for off := 0; off < size; off += len(buf) {
				if _, err := f.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

type repeater []byte

func (r repeater) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		n += copy(p[n:], r)
	}
	return n, nil
}

func repeat(b []byte) io.Reader { return repeater(b) }

// BenchmarkStatCached: stat of 10,000 cached files, beside the loopback
// file system stat-ing the same local files.
func BenchmarkStatCached(b *testing.B) {
	const n = 10000
	d := testenv.New(b, "bench")
	root := d.AddShare("data")
	os.MkdirAll(filepath.Join(root, "tree"), 0o755)
	for i := range n {
		os.WriteFile(filepath.Join(root, "tree", strconv.Itoa(i)), nil, 0o644)
	}
	statAll := func(dir string) {
		for i := range n {
			if _, err := os.Stat(filepath.Join(dir, strconv.Itoa(i))); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("reference=go-fuse-loopback", func(b *testing.B) {
		defer procs.Own()()
		mnt := filepath.Join(loopback(b, root), "tree")
		statAll(mnt)
		for b.Loop() {
			statAll(mnt)
		}
	})
	window := vfs.Options{Consistency: consistency.Consistency{Mode: consistency.ModeWindow, Period: time.Hour}}
	b.Run("pando-cached", func(b *testing.B) {
		a := startAgent(b, d, window, cache.Options{})
		dir := filepath.Join(a.Mount().Dir(), "bench", "data", "tree")
		os.ReadDir(dir)
		statAll(dir)
		for b.Loop() {
			statAll(dir)
		}
	})
	// Lent to another uid, the kernel keeps no entries or attributes:
	// every stat asks the agent (see guard.go).
	b.Run("pando-cached-lent", func(b *testing.B) {
		a := startAgentWith(b, d, agent.Config{VFS: window, LendTo: []uint32{65534}})
		dir := filepath.Join(a.Mount().Dir(), "bench", "data", "tree")
		os.ReadDir(dir)
		statAll(dir)
		for b.Loop() {
			statAll(dir)
		}
	})
}

// BenchmarkReRead: a file read cold through a fresh agent, then read
// again at once, then a third time (PANDO_BENCH_SIZES, MiB, comma
// separated; 256 and 1024 by default): MB/s of each read, and how each
// was served (opens by mode, READ requests the agent answered and their
// MiB). go test -run X -bench BenchmarkReRead -benchtime 1x -v
// ./internal/mount/
func BenchmarkReRead(b *testing.B) {
	d := testenv.New(b, "bench")
	root := d.AddShare("data")
	sizes := []int64{256, 1024}
	if s := os.Getenv("PANDO_BENCH_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatal(err)
			}
			sizes = append(sizes, int64(n))
		}
	}
	for _, mib := range sizes {
		size := mib << 20
		name := "f" + strconv.FormatInt(mib, 10)
		testenv.MakeFile(b, filepath.Join(root, name), size)
		readAll(b, filepath.Join(root, name)) // the share's page cache is warm
		b.Run(strconv.FormatInt(mib, 10)+"MiB", func(b *testing.B) {
			phases := []string{"cold", "reread1", "reread2"}
			took := make([]time.Duration, len(phases))
			served := make([]mount.Opens, len(phases))
			opened := make([]time.Duration, len(phases))
			for b.Loop() {
				b.StopTimer()
				a := startAgent(b, d, vfs.Options{}, cache.Options{DiskBytes: 4 * gib})
				p := filepath.Join(a.Mount().Dir(), "bench", "data", name)
				for i := range phases {
					before := a.Mount().Opens()
					t0 := time.Now()
					f, err := os.Open(p)
					if err != nil {
						b.Fatal(err)
					}
					opened[i] += time.Since(t0)
					if n := readFile(b, f); n != size {
						b.Fatalf("read %d of %d bytes", n, size)
					}
					took[i] += time.Since(t0)
					served[i] = a.Mount().Opens().Sub(before)
				}
				a.Close()
				b.StartTimer()
			}
			for i, ph := range phases {
				b.ReportMetric(float64(b.N)*float64(size)/1e6/took[i].Seconds(), ph+"-MB/s")
				b.ReportMetric(opened[i].Seconds()*1e3/float64(b.N), ph+"-open-ms")
				s := served[i]
				b.Logf("%s: pt=%d direct=%d cached=%d reads=%d read-MiB=%d", ph, s.Passthrough, s.Direct, s.Cached, s.Reads, s.ReadBytes>>20)
			}
		})
	}
}
