package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/pattern"
	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wan"
)

// runReaders: N concurrent readers of one file, each through its own agent
// (its own cache), aggregate bandwidth of the first and the second read.
func runReaders(ctx context.Context, o Options) ([]Row, error) {
	size := int64(128 << 20)
	counts := []int{1, 2, 4, 8, 16}
	if o.Quick {
		size, counts = 8<<20, []int{1, 2, 4}
	}
	e, root, _, err := startWith(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	if err := pattern.WriteFile(filepath.Join(root, "f"), size); err != nil {
		return nil, err
	}
	dropCache(filepath.Join(root, "f"))
	dl, _, err := timeRead(filepath.Join(root, "f"))
	if err != nil {
		return nil, err
	}
	local := mbps(size, dl)
	var rows []Row
	for _, n := range counts {
		o.say("readers: %d agents read one %s file", n, sizeName(size))
		agents := make([]*Agent, n)
		for i := range agents {
			if agents[i], err = e.Mount(vfs.Options{}, 0); err != nil {
				return nil, err
			}
		}
		pass := func() (float64, error) {
			var wg sync.WaitGroup
			errs := make(chan error, n)
			t0 := time.Now()
			for _, a := range agents {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, got, err := timeRead(a.Path("/bench/data/f")); err != nil || got != size {
						errs <- fmt.Errorf("a reader got %d of %d bytes: %v", got, size, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				return 0, err
			}
			return mbps(size*int64(n), time.Since(t0)), nil
		}
		first, err := pass()
		if err != nil {
			return nil, err
		}
		second, err := pass()
		if err != nil {
			return nil, err
		}
		for _, a := range agents {
			a.Unmount()
		}
		cs := fmt.Sprintf("%d readers", n)
		rows = append(rows,
			Row{Scenario: "readers", Case: cs, Metric: "first read", Value: first, Unit: "MB/s", Ref: "local disk cold, one reader", RefValue: local, HigherBetter: true, Note: "aggregate"},
			Row{Scenario: "readers", Case: cs, Metric: "second read", Value: second, Unit: "MB/s", Ref: "local disk cold, one reader", RefValue: local, HigherBetter: true, Note: "aggregate"})
	}
	return rows, nil
}

// srcTree is a compile-like source tree: sources that each include some
// headers, in a few directories.
type srcTree struct {
	dirs     int
	sources  int // per directory
	headers  int
	includes int // headers per source
}

func (t srcTree) build(root string) error {
	r := rand.New(rand.NewPCG(1, 2))
	if err := os.MkdirAll(filepath.Join(root, "include"), 0o755); err != nil {
		return err
	}
	body := strings.Repeat("int x = 1; /* line of code */\n", 100) // 3 KiB
	for h := range t.headers {
		if err := os.WriteFile(filepath.Join(root, "include", fmt.Sprintf("h%d.h", h)), []byte(body), 0o644); err != nil {
			return err
		}
	}
	for d := range t.dirs {
		dir := filepath.Join(root, fmt.Sprintf("mod%d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for s := range t.sources {
			var b strings.Builder
			for range t.includes {
				fmt.Fprintf(&b, "#include \"../include/h%d.h\"\n", r.IntN(t.headers))
			}
			b.WriteString(body)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("s%d.c", s)), []byte(b.String()), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// compile is make over the tree: a source whose object is missing or older
// is "compiled" (read with its headers, object written); then a second,
// incremental make that finds everything up to date (the stat storm that
// consistency modes differ on).
func (t srcTree) compile(root string) error {
	for d := range t.dirs {
		dir := filepath.Join(root, fmt.Sprintf("mod%d", d))
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, ent := range ents {
			if !strings.HasSuffix(ent.Name(), ".c") {
				continue
			}
			src := filepath.Join(dir, ent.Name())
			obj := strings.TrimSuffix(src, ".c") + ".o"
			si, err := os.Stat(src)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(src)
			if err != nil {
				return err
			}
			newest := si.ModTime()
			var incs []string
			for _, line := range strings.Split(string(b), "\n") {
				if rest, ok := strings.CutPrefix(line, "#include \""); ok {
					incs = append(incs, filepath.Join(dir, strings.TrimSuffix(rest, "\"")))
				}
			}
			for _, h := range incs {
				hi, err := os.Stat(h)
				if err != nil {
					return err
				}
				if hi.ModTime().After(newest) {
					newest = hi.ModTime()
				}
			}
			if oi, err := os.Stat(obj); err == nil && !oi.ModTime().Before(newest) {
				continue // up to date
			}
			out := len(b)
			for _, h := range incs {
				hb, err := os.ReadFile(h)
				if err != nil {
					return err
				}
				out += len(hb)
			}
			if err := os.WriteFile(obj, make([]byte, out/4), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// watcherSettle is how long a share's directory watcher is given to see
// what was made directly in its exported directory.
const watcherSettle = 500 * time.Millisecond

// consistencyOps are the RPCs that only check freshness.
var consistencyOps = []string{"getattr", "fgetattr", "getinv", "readdir"}

func sumOps(m map[string]uint64, ops []string) uint64 {
	var n uint64
	for _, op := range ops {
		n += m[op]
	}
	return n
}

// onlyOps keeps the counts of ops.
func onlyOps(m map[string]uint64, ops []string) map[string]uint64 {
	out := make(map[string]uint64)
	for _, op := range ops {
		if m[op] > 0 {
			out[op] = m[op]
		}
	}
	return out
}

// opsNote lists counts by kind, "close=120 create=20 ...".
func opsNote(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		if k == "auth" || k == "resolve" || k == "ping" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// makeModes are the consistency modes the make scenario compares; a
// "+back" suffix adds write mode back (write delegations).
var makeModes = []string{"strict", "window=3s", "poll=30s", "callback", "callback+back"}

func runMake(ctx context.Context, o Options) ([]Row, error) {
	tree := srcTree{dirs: 4, sources: 25, headers: 20, includes: 5}
	rtt := 10 * time.Millisecond
	if len(o.RTTs) > 0 {
		rtt = o.RTTs[0]
	}
	if o.Quick {
		tree = srcTree{dirs: 2, sources: 10, headers: 8, includes: 3}
		if len(o.RTTs) == 0 {
			rtt = 0
		}
	}
	link := &wan.Config{RTT: rtt, Rate: o.Rate}
	e, root, _, err := startWith(ctx, link)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	local := filepath.Join(e.Dir, "local")
	if err := tree.build(local); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := tree.compile(local); err != nil {
		return nil, err
	}
	if err := tree.compile(local); err != nil {
		return nil, err
	}
	ref := time.Since(t0).Seconds() * 1000
	// Every mode's tree is made at the share before the first agent
	// starts, and the share's watcher is given time to see it: made
	// between two modes, its creation would reach the agents of the
	// later modes as changes, or not, by timing.
	modes := o.modes(makeModes)
	for i := range modes {
		if err := tree.build(filepath.Join(root, fmt.Sprint("tree", i))); err != nil {
			return nil, err
		}
	}
	time.Sleep(watcherSettle)
	var rows []Row
	for i, mode := range modes {
		cons, back := strings.CutSuffix(mode, "+back")
		c, err := consistency.Parse(cons)
		if err != nil {
			return nil, err
		}
		wm := vfs.WriteClose
		if back {
			wm = vfs.WriteBack
		}
		a, err := e.Mount(vfs.Options{Consistency: c, Write: wm}, 1)
		if err != nil {
			return nil, err
		}
		o.say("make: %d sources through a %v link, consistency %s", tree.dirs*tree.sources, rtt, mode)
		before := a.Stats().RPCs
		t0 := time.Now()
		p := a.Path(fmt.Sprintf("/bench/data/tree%d", i))
		if err := tree.compile(p); err != nil {
			return nil, err
		}
		if err := tree.compile(p); err != nil {
			return nil, err
		}
		took := time.Since(t0).Seconds() * 1000
		after := a.Stats().RPCs
		a.Unmount()
		delta := make(map[string]uint64)
		var total uint64
		for k, v := range after {
			if d := v - before[k]; d > 0 && k != "auth" && k != "resolve" && k != "ping" {
				delta[k] = d
				total += d
			}
		}
		cs := mode
		rows = append(rows,
			Row{Scenario: "make", Case: cs, Metric: "time", Value: took, Unit: "ms", Ref: "local disk", RefValue: ref,
				Note: fmt.Sprintf("rtt %v; build then up-to-date rebuild", rtt)},
			Row{Scenario: "make", Case: cs, Metric: "consistency RPCs", Value: float64(sumOps(delta, consistencyOps)), Unit: "calls",
				Note: opsNote(onlyOps(delta, consistencyOps))},
			Row{Scenario: "make", Case: cs, Metric: "all RPCs", Value: float64(total), Unit: "calls",
				Note: opsNote(delta), RPCs: delta})
	}
	return rows, nil
}

// runPostmark: PostMark-style transactions over a pool of small files:
// each is a read or an append, then a create or a delete.
func runPostmark(ctx context.Context, o Options) ([]Row, error) {
	files, txns := 500, 2000
	if o.Quick {
		files, txns = 100, 300
	}
	e, _, a, local, err := startMounted(ctx)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	o.say("postmark: %d files, %d transactions, through the mount and on local disk", files, txns)
	lt, err := postmark(local, files, txns)
	if err != nil {
		return nil, err
	}
	pt, err := postmark(a.Path("/bench/data"), files, txns)
	if err != nil {
		return nil, err
	}
	tps := func(d time.Duration) float64 { return float64(txns) / d.Seconds() }
	return []Row{{Scenario: "postmark", Case: fmt.Sprintf("%d files", files), Metric: "transactions", Value: tps(pt), Unit: "txn/s",
		Ref: "local disk", RefValue: tps(lt), HigherBetter: true, Note: "files of 512 B..16 KiB; creation and deletion included"}}, nil
}

// postmark runs the workload in dir and returns the time of the transaction
// phase plus the initial creation and final deletion.
func postmark(dir string, files, txns int) (time.Duration, error) {
	r := rand.New(rand.NewPCG(7, 7))
	buf := make([]byte, 16<<10)
	for i := range buf {
		buf[i] = byte(i)
	}
	size := func() int { return 512 + r.IntN(len(buf)-512) }
	var live []string
	next := 0
	create := func() error {
		name := filepath.Join(dir, fmt.Sprintf("pm%d", next))
		next++
		live = append(live, name)
		return os.WriteFile(name, buf[:size()], 0o644)
	}
	t0 := time.Now()
	for range files {
		if err := create(); err != nil {
			return 0, err
		}
	}
	for range txns {
		name := live[r.IntN(len(live))]
		if r.IntN(2) == 0 {
			if _, err := os.ReadFile(name); err != nil {
				return 0, err
			}
		} else {
			f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return 0, err
			}
			_, err = f.Write(buf[:r.IntN(4096)+1])
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return 0, err
			}
		}
		if r.IntN(2) == 0 || len(live) < 2 {
			if err := create(); err != nil {
				return 0, err
			}
		} else {
			i := r.IntN(len(live))
			if err := os.Remove(live[i]); err != nil {
				return 0, err
			}
			live = append(live[:i], live[i+1:]...)
		}
	}
	for _, name := range live {
		if err := os.Remove(name); err != nil {
			return 0, err
		}
	}
	return time.Since(t0), nil
}
