package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"pando.dev/pando/internal/mount"
	"pando.dev/pando/internal/pattern"
	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wan"
)

// Options tune a run.
type Options struct {
	Quick bool
	RTTs  []time.Duration // for wan; default 0, 10, 40, 80 ms
	Rate  int64           // bits/s for wan; default 1 Gbit/s
	// Modes, if set, are the consistency modes make and lock compare
	// instead of their own list ("callback+back" adds write mode back).
	Modes []string
	// Big makes walk's tree 20,000 files in 2,000 directories.
	Big bool
	// Progress, if set, hears what is being measured.
	Progress func(string)
}

// modes returns o.Modes if set, else def.
func (o *Options) modes(def []string) []string {
	if len(o.Modes) > 0 {
		return o.Modes
	}
	return def
}

func (o *Options) say(format string, args ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, args...))
	}
}

// Scenario runs one experiment.
type Scenario struct {
	Name, About string
	Run         func(ctx context.Context, o Options) ([]Row, error)
}

// Scenarios are all experiments, in the order `all` runs them.
func Scenarios() []Scenario {
	return []Scenario{
		{"open", "open-for-read and create latency, median and p99 (Avaki: 3.5 ms and 28.7 ms)", runOpen},
		{"read", "sequential read by size, cold, warm (again at once) and warm again, beside a local-disk read", runRead},
		{"readers", "1..16 concurrent readers of one file, each through its own agent: aggregate bandwidth", runReaders},
		{"write", "sequential write by size per write mode, beside a local write", runWrite},
		{"contention", "N processes open one remote file at once: time and bytes fetched (GASS)", runContention},
		{"wan", "cold read and write through the WAN emulator at several RTTs, beside the raw link", runWAN},
		{"make", "compile-like metadata workload per consistency mode, with RPC counts by kind", runMake},
		{"walk", "find and stat of a tree of 2,000 small files in 100 directories (--big: 20,000 in 2,000; --quick: 200 in 20) through the WAN emulator per RTT and consistency mode: first walk, again at once, after the window, after a restart of the agent on its cache; round trips by kind", runWalk},
		{"repo-update", "a tree read-shared by six agents, 540 files updated at the share: the RPCs of looking again, per consistency mode (GVFS)", runRepoUpdate},
		{"recall", "a write delegation on a large file kept back by one agent, recalled by another's read near its end: time to that block beside the whole file", runRecall},
		{"lock", "six agents compete for one lock file by hard-linking, per consistency mode: fairness, time to acquire, RPCs (GVFS)", runLock},
		{"transfer", "pando cp memory-to-memory and disk-to-disk, 1 and 4 streams, by RTT, beside the raw link, Go's TLS and globus-url-copy; 10,000 small files", runTransfer},
		{"faults", "a share frozen (SIGSTOP) per consistency mode: time to the first answered read, cached and not, and to fresh data once it answers again; operations failed while the controller is stopped", runFaults},
		{"controllers", "token requests and ACL reads per second with 1, 2 and 3 controllers on etcd beside one on bbolt; time from losing a controller or the etcd leader to the next answered request", runControllers},
		{"postmark", "PostMark-style transactions over small files (create, delete, read, append)", runPostmark},
		{"gateways", "a large file read cold and warm and 10,000 x 4 KiB files written through the HTTP, WebDAV, S3, NFS and SMB gateways, beside the mount (passthrough) and rclone serve over the mount (TLS and clear); warm reads by curl, with CPU-s/GiB of the server and of curl", runGateways},
		{"relay", "a large file read cold through the mount from a share served only through a relay (pando relay), beside the same read from a share reached directly, alternating, median of three", runRelay},
		{"federation", "an agent of one domain walks a tree (2,000 files) and reads a large file cold at a linked domain's share behind the WAN emulator (40 ms), beside the same at its home share; the linked domain's read through a relay beside its direct read", runFederation},
		{"bigdir", "ls -f and ls -l of 10,000, 100,000 and 1,000,000 entries through the mount beside the share's local directory; agent and share RSS after each", runBigdir},
	}
}

// Find returns the scenario called name.
func Find(name string) (Scenario, bool) {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Names lists the scenario names.
func Names() []string {
	var out []string
	for _, s := range Scenarios() {
		out = append(out, s.Name)
	}
	return out
}

func startWith(ctx context.Context, link *wan.Config) (*Env, string, *wan.Proxy, error) {
	e, err := NewEnv(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	root, px, err := e.AddShare(ctx, "data", link)
	if err != nil {
		e.Close()
		return nil, "", nil, err
	}
	return e, root, px, nil
}

// startMounted starts a domain with one share, an agent, and a local
// folder for the reference.
func startMounted(ctx context.Context) (e *Env, root string, a *Agent, local string, err error) {
	if e, root, _, err = startWith(ctx, nil); err != nil {
		return nil, "", nil, "", err
	}
	local = filepath.Join(e.Dir, "local")
	if err = os.MkdirAll(local, 0o755); err == nil {
		a, err = e.Mount(vfs.Options{}, 0)
	}
	if err != nil {
		e.Close()
		return nil, "", nil, "", err
	}
	return e, root, a, local, nil
}

func quantile(d []time.Duration, q float64) float64 {
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[min(len(s)-1, int(q*float64(len(s))))].Microseconds()) / 1000
}

func runOpen(ctx context.Context, o Options) ([]Row, error) {
	n := 1000
	if o.Quick {
		n = 200
	}
	e, root, a, local, err := startMounted(ctx)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	os.WriteFile(filepath.Join(root, "f"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(local, "f"), []byte("x"), 0o644)
	remote := a.Path("/bench/data/f")
	measure := func(fn func(i int) error) ([]time.Duration, error) {
		out := make([]time.Duration, 0, n)
		for i := 0; i < n; i++ {
			t0 := time.Now()
			if err := fn(i); err != nil {
				return nil, err
			}
			out = append(out, time.Since(t0))
		}
		return out, nil
	}
	openRead := func(p string) func(int) error {
		return func(int) error {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			return f.Close()
		}
	}
	create := func(dir string) func(int) error {
		return func(i int) error {
			f, err := os.Create(filepath.Join(dir, fmt.Sprint("c", i)))
			if err != nil {
				return err
			}
			return f.Close()
		}
	}
	o.say("open: %d opens and %d creates through the mount and on local disk", n, n)
	po, err := measure(openRead(remote))
	if err != nil {
		return nil, err
	}
	lo, _ := measure(openRead(filepath.Join(local, "f")))
	pc, err := measure(create(a.Path("/bench/data")))
	if err != nil {
		return nil, err
	}
	lc, _ := measure(create(local))
	row := func(cs string, p, l []time.Duration, q float64) Row {
		return Row{Scenario: "open", Case: cs, Metric: "latency", Value: quantile(p, q), Unit: "ms",
			Ref: "local disk", RefValue: quantile(l, q)}
	}
	rows := []Row{
		row("open median", po, lo, 0.5), row("open p99", po, lo, 0.99),
		row("create median", pc, lc, 0.5), row("create p99", pc, lc, 0.99),
	}
	rows[0].Note = "Avaki: 3.5 ms, NFSv3: 1.1 ms"
	rows[2].Note = "Avaki: 28.7 ms, NFSv3: 2.3 ms"
	return rows, nil
}

func readSizes(o Options) []int64 {
	max := int64(1 << 30)
	if o.Quick {
		max = 32 << 20
	}
	var out []int64
	for s := int64(1 << 20); s <= max; s *= 2 {
		out = append(out, s)
	}
	return out
}

func runRead(ctx context.Context, o Options) ([]Row, error) {
	e, root, _, err := startWith(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	var rows []Row
	for _, size := range readSizes(o) {
		name := "f" + sizeName(size)
		if err := pattern.WriteFile(filepath.Join(root, name), size); err != nil {
			return nil, err
		}
		o.say("read: %s", sizeName(size))
		local := filepath.Join(e.Dir, "local-"+name)
		if err := pattern.WriteFile(local, size); err != nil {
			return nil, err
		}
		dropCache(local)
		lc, _, err := timeRead(local)
		if err != nil {
			return nil, err
		}
		lw, _, err := timeRead(local)
		if err != nil {
			return nil, err
		}
		os.Remove(local)
		a, err := e.Mount(vfs.Options{}, 0)
		if err != nil {
			return nil, err
		}
		dropCache(filepath.Join(root, name)) // cold all the way to the share's disk
		p := a.Path("/bench/data/" + name)
		// Cold, right after it, then once more; how each was served.
		var took [3]time.Duration
		var how [3]string
		var n int64
		for i := range took {
			o := a.Mount().Opens()
			if took[i], n, err = timeRead(p); err != nil {
				return nil, err
			}
			how[i] = servedAs(a.Mount().Opens().Sub(o))
		}
		if c := a.Cache(); c != nil {
			c.Sync()
			if around := c.Stats().WrittenAround; around > 0 {
				how[0] += fmt.Sprintf("; %d MiB written around the page cache", around>>20)
			}
		}
		a.Unmount()
		if n != size {
			return nil, fmt.Errorf("read %d bytes of %d", n, size)
		}
		rows = append(rows,
			Row{Scenario: "read", Case: sizeName(size), Metric: "cold read", Value: mbps(size, took[0]), Unit: "MB/s", Ref: "local disk, cold", RefValue: mbps(size, lc), HigherBetter: true, Note: how[0]},
			Row{Scenario: "read", Case: sizeName(size), Metric: "warm read", Value: mbps(size, took[1]), Unit: "MB/s", Ref: "local file, page cache", RefValue: mbps(size, lw), HigherBetter: true, Note: how[1]},
			Row{Scenario: "read", Case: sizeName(size), Metric: "warm read again", Value: mbps(size, took[2]), Unit: "MB/s", Ref: "local file, page cache", RefValue: mbps(size, lw), HigherBetter: true, Note: how[2]})
	}
	return rows, nil
}

// servedAs says how a read was served: its opens by mode and the READ
// requests the agent answered.
func servedAs(o mount.Opens) string {
	var modes []string
	for _, m := range []struct {
		n    int64
		name string
	}{{o.Passthrough, "passthrough"}, {o.Direct, "direct"}, {o.Cached, "cached"}} {
		if m.n > 0 {
			modes = append(modes, m.name)
		}
	}
	return fmt.Sprintf("%s, %d READs to the agent", strings.Join(modes, "+"), o.Reads)
}

func writeFile(path string, size int64) (time.Duration, error) {
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	t0 := time.Now()
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.Write(buf[:min(int64(len(buf)), size-off)]); err != nil {
			f.Close()
			return 0, err
		}
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

func runWrite(ctx context.Context, o Options) ([]Row, error) {
	e, _, _, err := startWith(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	local := filepath.Join(e.Dir, "local")
	os.MkdirAll(local, 0o755)
	var rows []Row
	for _, mode := range []vfs.WriteMode{vfs.WriteClose, vfs.WriteThrough} {
		a, err := e.Mount(vfs.Options{Write: mode}, 0)
		if err != nil {
			return nil, err
		}
		for _, size := range readSizes(o) {
			o.say("write: %s, write mode %s", sizeName(size), mode)
			dl, err := writeFile(filepath.Join(local, "w"), size)
			if err != nil {
				return nil, err
			}
			dp, err := writeFile(a.Path("/bench/data/w-"+mode.String()), size)
			if err != nil {
				return nil, err
			}
			rows = append(rows, Row{Scenario: "write", Case: sizeName(size), Metric: "write " + mode.String(),
				Value: mbps(size, dp), Unit: "MB/s", Ref: "local disk", RefValue: mbps(size, dl), HigherBetter: true,
				Note: "open to close, data at the share"})
		}
		a.Unmount()
	}
	return rows, nil
}

func runContention(ctx context.Context, o Options) ([]Row, error) {
	size := int64(256 << 20)
	if o.Quick {
		size = 16 << 20
	}
	e, root, _, err := startWith(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	if err := pattern.WriteFile(filepath.Join(root, "shared"), size); err != nil {
		return nil, err
	}
	var rows []Row
	for _, n := range []int{1, 4, 16} {
		a, err := e.Mount(vfs.Options{}, 0)
		if err != nil {
			return nil, err
		}
		o.say("contention: %d readers of one %s file", n, sizeName(size))
		var wg sync.WaitGroup
		errs := make(chan error, n)
		t0 := time.Now()
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, got, err := timeRead(a.Path("/bench/data/shared")); err != nil || got != size {
					errs <- fmt.Errorf("a reader got %d bytes: %v", got, err)
				}
			}()
		}
		wg.Wait()
		took := time.Since(t0)
		close(errs)
		if err := <-errs; err != nil {
			return nil, err
		}
		fetched := a.Stats().Cache.BytesFetched
		a.Unmount()
		rows = append(rows,
			Row{Scenario: "contention", Case: fmt.Sprintf("%d readers", n), Metric: "time to all done", Value: took.Seconds() * 1000, Unit: "ms"},
			Row{Scenario: "contention", Case: fmt.Sprintf("%d readers", n), Metric: "bytes fetched", Value: float64(fetched) / float64(size), Unit: "copies",
				Ref: "one copy", RefValue: 1, Note: "GASS: N opens cause one transfer"})
	}
	return rows, nil
}

// sendBytes accepts one connection on ln and sends it size bytes.
func sendBytes(ln net.Listener, size int64) {
	c, err := ln.Accept()
	if err != nil {
		return
	}
	defer c.Close()
	buf := make([]byte, 1<<20)
	for sent := int64(0); sent < size; sent += int64(len(buf)) {
		if _, err := c.Write(buf[:min(int64(len(buf)), size-sent)]); err != nil {
			return
		}
	}
}

// rawLink measures a plain TCP stream of size bytes through a proxy with
// the same settings: the reference for WAN figures.
func rawLink(cfg wan.Config, size int64) (float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	go sendBytes(ln, size)
	px, err := wan.Listen("127.0.0.1:0", ln.Addr().String(), cfg)
	if err != nil {
		return 0, err
	}
	defer px.Close()
	return receive("raw link", size, func() (net.Conn, error) { return net.Dial("tcp", px.Addr()) })
}

// receive times dialling a connection and reading the size bytes the
// other end sends, in MB/s.
func receive(what string, size int64, dial func() (net.Conn, error)) (float64, error) {
	t0 := time.Now()
	c, err := dial()
	if err != nil {
		return 0, err
	}
	defer c.Close()
	n, _ := io.Copy(io.Discard, c)
	if n != size {
		return 0, fmt.Errorf("%s moved %d of %d bytes", what, n, size)
	}
	return mbps(size, time.Since(t0)), nil
}

func runWAN(ctx context.Context, o Options) ([]Row, error) {
	rtts := o.RTTs
	if len(rtts) == 0 {
		rtts = []time.Duration{0, 10 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond}
	}
	rate := o.Rate
	if rate == 0 {
		rate = 1e9
	}
	size := int64(256 << 20)
	if o.Quick {
		size = 16 << 20
	}
	var rows []Row
	for _, rtt := range rtts {
		cfg := wan.Config{RTT: rtt, Rate: rate}
		o.say("wan: rtt %v, %s", rtt, wan.FormatRate(rate))
		raw, err := rawLink(cfg, size)
		if err != nil {
			return nil, err
		}
		e, root, _, err := startWith(ctx, &cfg)
		if err != nil {
			return nil, err
		}
		if err := pattern.WriteFile(filepath.Join(root, "f"), size); err != nil {
			e.Close()
			return nil, err
		}
		// One data stream: the emulator caps each connection, so more
		// streams would get more than the link.
		a, err := e.Mount(vfs.Options{}, 1)
		if err != nil {
			e.Close()
			return nil, err
		}
		dr, _, err := timeRead(a.Path("/bench/data/f"))
		if err != nil {
			e.Close()
			return nil, err
		}
		dw, err := writeFile(a.Path("/bench/data/w"), size)
		e.Close()
		if err != nil {
			return nil, err
		}
		cs := "rtt " + strings.TrimSuffix(rtt.String(), "0s")
		if rtt == 0 {
			cs = "rtt 0"
		}
		rows = append(rows,
			Row{Scenario: "wan", Case: cs, Metric: "cold read", Value: mbps(size, dr), Unit: "MB/s", Ref: "raw link", RefValue: raw, HigherBetter: true},
			Row{Scenario: "wan", Case: cs, Metric: "write close", Value: mbps(size, dw), Unit: "MB/s", Ref: "raw link", RefValue: raw, HigherBetter: true})
	}
	return rows, nil
}
