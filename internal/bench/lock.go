package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wan"
)

// lockModes are the consistency modes the lock scenario compares.
var lockModes = []string{"callback", "strict", "window=3s", "poll=30s"}

// lockPlan sizes one run of the lock scenario.
type lockPlan struct {
	agents   int
	total    int           // stop once this many acquisitions were made
	limit    time.Duration // or after this long
	hold     time.Duration // the lock holder's pause between reading and writing the counter
	backoff  time.Duration // after a failed link and after a release: backoff plus up to backoff again
	rtt      time.Duration
	linkRate int64
}

// lockResult is what one run measured.
type lockResult struct {
	perAgent []int
	waits    []time.Duration // time to acquire, one per acquisition
	cut      []time.Duration // tries still failing when the run stopped, to then
	held     time.Duration   // sum of the times the lock was held
	took     time.Duration
	counter  int
	timedOut bool
	rpcs     map[string]uint64
}

func (r lockResult) acquisitions() int {
	n := 0
	for _, c := range r.perAgent {
		n += c
	}
	return n
}

// jain is Jain's fairness index of xs: 1 when all are equal, 1/n when one
// has everything.
func jain(xs []int) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// runLock: six agents compete for one lock file by hard-linking, as in
// GVFS section 5.1.2. Each agent's worker creates its own temporary file
// and tries link(tmp, "lock"); the one whose link succeeds holds the lock,
// reads a shared counter, pauses, writes it back plus one, and unlinks
// "lock". A failed link (EEXIST) is retried after a back-off, and a
// release is followed by the same back-off before the next try. Under a
// weak consistency mode an agent may go on seeing a released lock, and the
// last holder tends to win again: the acquisitions per agent show it.
func runLock(ctx context.Context, o Options) ([]Row, error) {
	p := lockPlan{agents: 6, total: 60, limit: 3 * time.Minute, hold: 100 * time.Millisecond,
		backoff: 50 * time.Millisecond, rtt: 40 * time.Millisecond, linkRate: o.Rate}
	if o.Quick {
		p.total, p.limit = 18, 45*time.Second
	}
	if len(o.RTTs) > 0 {
		p.rtt = o.RTTs[0]
	}
	var rows []Row
	for _, mode := range o.modes(lockModes) {
		c, err := consistency.Parse(mode)
		if err != nil {
			return nil, err
		}
		o.say("lock: %d agents compete for one lock file through a %v link, consistency %s", p.agents, p.rtt, mode)
		r, err := lockRun(ctx, p, c)
		if err != nil {
			return nil, fmt.Errorf("consistency %s: %w", mode, err)
		}
		n := r.acquisitions()
		if r.counter != n && (c.Mode == consistency.ModeStrict || c.Mode == consistency.ModeCallback) {
			return nil, fmt.Errorf("consistency %s: the counter says %d after %d acquisitions: an update made under the lock was lost", mode, r.counter, n)
		}
		lo, hi := r.perAgent[0], r.perAgent[0]
		counts := make([]string, len(r.perAgent))
		for i, x := range r.perAgent {
			lo, hi = min(lo, x), max(hi, x)
			counts[i] = strconv.Itoa(x)
		}
		share := float64(n) / float64(p.agents)
		each := "each agent: " + strings.Join(counts, " ")
		// An agent that never got the lock waited too: tries cut off by
		// the end of the run count, to the end.
		waits := append(slices.Clone(r.waits), r.cut...)
		var mean, longestCut time.Duration
		for _, w := range waits {
			mean += w
		}
		mean /= time.Duration(len(waits))
		for _, w := range r.cut {
			longestCut = max(longestCut, w)
		}
		waitNote := fmt.Sprintf("first try to the link that succeeded; back-off %v..%v", p.backoff, 2*p.backoff)
		if len(r.cut) > 0 {
			waitNote += fmt.Sprintf("; with %d tries cut off by the end (longest %.1f s)", len(r.cut), longestCut.Seconds())
		}
		cs := mode
		run := fmt.Sprintf("rtt %v; %d acquisitions", p.rtt, n)
		if r.timedOut {
			run += fmt.Sprintf(", stopped at the %v limit", p.limit)
		}
		counterNote := "read-modify-write under the lock"
		if r.counter != n {
			counterNote = fmt.Sprintf("%d updates lost to stale reads, which %s allows", n-r.counter, mode)
		}
		var total uint64
		for _, v := range r.rpcs {
			total += v
		}
		rows = append(rows,
			Row{Scenario: "lock", Case: cs, Metric: "fairness", Value: jain(r.perAgent), Unit: "Jain index",
				Ref: "fair share", RefValue: 1, HigherBetter: true, Note: each},
			Row{Scenario: "lock", Case: cs, Metric: "acquisitions min", Value: float64(lo), Unit: "acquisitions",
				Ref: "fair share", RefValue: share, HigherBetter: true, Note: each},
			Row{Scenario: "lock", Case: cs, Metric: "acquisitions max", Value: float64(hi), Unit: "acquisitions",
				Ref: "fair share", RefValue: share, Note: each},
			Row{Scenario: "lock", Case: cs, Metric: "time to acquire mean", Value: ms(mean), Unit: "ms", Note: waitNote},
			Row{Scenario: "lock", Case: cs, Metric: "time to acquire p99", Value: quantile(waits, 0.99), Unit: "ms"},
			Row{Scenario: "lock", Case: cs, Metric: "total time", Value: ms(r.took), Unit: "ms",
				Ref: "lock held", RefValue: ms(r.held), Note: run},
			Row{Scenario: "lock", Case: cs, Metric: "counter", Value: float64(r.counter), Unit: "updates",
				Ref: "acquisitions", RefValue: float64(n), HigherBetter: true, Note: counterNote},
			Row{Scenario: "lock", Case: cs, Metric: "consistency RPCs", Value: float64(sumOps(r.rpcs, consistencyOps)), Unit: "calls",
				Note: opsNote(onlyOps(r.rpcs, consistencyOps))},
			Row{Scenario: "lock", Case: cs, Metric: "all RPCs", Value: float64(total), Unit: "calls",
				Note: fmt.Sprintf("%d agents: %s", p.agents, opsNote(r.rpcs))})
	}
	return rows, nil
}

func ms(d time.Duration) float64 { return d.Seconds() * 1000 }

// lockRun starts a domain with one share behind the emulated link and the
// agents in consistency mode c, and lets them compete.
func lockRun(ctx context.Context, p lockPlan, c consistency.Consistency) (lockResult, error) {
	var r lockResult
	e, root, _, err := startWith(ctx, &wan.Config{RTT: p.rtt, Rate: p.linkRate})
	if err != nil {
		return r, err
	}
	defer e.Close()
	if err := os.MkdirAll(filepath.Join(root, "lk"), 0o755); err != nil {
		return r, err
	}
	if err := os.WriteFile(filepath.Join(root, "lk", "counter"), []byte("0\n"), 0o644); err != nil {
		return r, err
	}
	as := make([]*Agent, p.agents)
	for i := range as {
		if as[i], err = e.Mount(vfs.Options{Consistency: c}, 1); err != nil {
			return r, err
		}
		// Each worker's own temporary file, made through its agent.
		if err := os.WriteFile(as[i].Path(fmt.Sprintf("/bench/data/lk/tmp-%d", i)), []byte(strconv.Itoa(i)), 0o644); err != nil {
			return r, err
		}
	}
	before := make([]map[string]uint64, len(as))
	for i, a := range as {
		before[i] = a.Stats().RPCs
	}

	var (
		holder   atomic.Int32 // who holds the lock, by the workers' own account: 0 is nobody
		acquired atomic.Int32
		stop     = make(chan struct{})
		stopOnce sync.Once
		mu       sync.Mutex
	)
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	r.perAgent = make([]int, p.agents)
	errs := make(chan error, p.agents)
	var wg sync.WaitGroup
	t0 := time.Now()
	timer := time.AfterFunc(p.limit, func() {
		mu.Lock()
		r.timedOut = true
		mu.Unlock()
		halt()
	})
	defer timer.Stop()
	for i, a := range as {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(i), 42))
			pause := func() {
				select {
				case <-time.After(p.backoff + time.Duration(rnd.Int64N(int64(p.backoff)+1))):
				case <-stop:
				}
			}
			tmp := a.Path(fmt.Sprintf("/bench/data/lk/tmp-%d", i))
			lock := a.Path("/bench/data/lk/lock")
			counter := a.Path("/bench/data/lk/counter")
			for !stopped() {
				start := time.Now()
				for {
					err := os.Link(tmp, lock)
					if err == nil {
						break
					}
					if !errors.Is(err, fs.ErrExist) {
						errs <- fmt.Errorf("agent %d: %w", i, err)
						halt()
						return
					}
					if pause(); stopped() {
						mu.Lock()
						r.cut = append(r.cut, time.Since(start))
						mu.Unlock()
						return
					}
				}
				got := time.Now()
				if !holder.CompareAndSwap(0, int32(i+1)) {
					errs <- fmt.Errorf("agent %d linked the lock file while agent %d held it: mutual exclusion violated", i, holder.Load()-1)
					halt()
					return
				}
				err := bumpCounter(counter, p.hold)
				holder.Store(0) // before the unlink: once it is done, another may hold the lock
				if uerr := os.Remove(lock); err == nil && uerr != nil {
					err = fmt.Errorf("releasing the lock: %w", uerr)
				}
				if err != nil {
					errs <- fmt.Errorf("agent %d: %w", i, err)
					halt()
					return
				}
				mu.Lock()
				r.perAgent[i]++
				r.waits = append(r.waits, got.Sub(start))
				r.held += time.Since(got)
				mu.Unlock()
				if int(acquired.Add(1)) >= p.total {
					halt()
				}
				pause()
			}
		}()
	}
	wg.Wait()
	r.took = time.Since(t0)
	timer.Stop()
	close(errs)
	if err := <-errs; err != nil {
		return r, err
	}
	if len(r.waits) == 0 {
		return r, fmt.Errorf("no agent got the lock in %v", p.limit)
	}
	r.rpcs = make(map[string]uint64)
	for i, a := range as {
		for k, v := range a.Stats().RPCs {
			if d := v - before[i][k]; d > 0 && k != "auth" && k != "resolve" && k != "ping" && k != "mount-list" {
				r.rpcs[k] += d
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(root, "lk", "counter"))
	if err != nil {
		return r, err
	}
	if r.counter, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
		return r, fmt.Errorf("the counter file holds %q: %w", b, err)
	}
	return r, nil
}

// bumpCounter is the work done under the lock: read the counter, pause,
// write it back plus one.
func bumpCounter(path string, hold time.Duration) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the counter: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("the counter file holds %q: %w", b, err)
	}
	time.Sleep(hold)
	if err := os.WriteFile(path, []byte(strconv.Itoa(n+1)+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing the counter: %w", err)
	}
	return nil
}
