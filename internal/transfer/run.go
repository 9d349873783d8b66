package transfer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/wire"
)

// Options tune a transfer.
type Options struct {
	Streams   int   // parallel data streams per share (-p); default 4
	Block     int   // bytes per block; default 4 MiB
	Rate      int64 // bytes per second over the whole transfer; 0: no cap
	Recursive bool  // copy directory trees
	Resume    bool  // continue from the journal / skip files already there
	Verify    bool  // re-read each destination file from disk and compare
	Retries   int   // attempts after the first, per file, on transient failures
	// NoSync leaves the copy to the destination's page cache, as cp does:
	// blocks are journaled once written, not once synced, and a resume
	// checks them against their sums before it trusts them.
	NoSync bool
	// JournalDir holds the journals of large files (default JournalDir()).
	JournalDir string
	// Checkpoint is how often written blocks are made durable and
	// journaled (default 1s).
	Checkpoint time.Duration
	// Grid returns the client for pando:// paths (nil: none allowed).
	Grid func() (*client.Client, error)
	// GridAt, if set, returns the client of the domain a pando:// path
	// lies in (the home client, or a linked domain's) in Grid's place.
	GridAt func(ctx context.Context, gpath string) (*client.Client, error)
	// ViaClient moves data between two pando paths through this client
	// instead of share to share.
	ViaClient bool
	// Progress, if set, is called about ten times a second.
	Progress func(Progress)
}

// Progress is the state of a running transfer.
type Progress struct {
	Files, FilesTotal int64
	Bytes, BytesTotal int64 // done (moved or found done) and known so far
	Elapsed           time.Duration
	Walking           bool // still discovering files
}

// Summary describes a finished transfer.
type Summary struct {
	Files    int64 `json:"files"`
	Dirs     int64 `json:"dirs"`
	Bytes    int64 `json:"bytes"`         // size of all files
	Moved    int64 `json:"bytes_moved"`   // bytes carried in this run
	Skipped  int64 `json:"bytes_skipped"` // bytes found already at the destination (resumed)
	Verified int64 `json:"bytes_verified"`
	Retries  int64 `json:"retries"`
	Corrupt  int64 `json:"corrupt_blocks"` // blocks sent again after a checksum mismatch
	Failed   int64 `json:"files_failed"`
	// ThirdParty: the data moved share to share; ClientData counts the
	// file data bytes that passed through this client.
	ThirdParty bool    `json:"third_party"`
	ClientData int64   `json:"client_data_bytes"`
	Seconds    float64 `json:"seconds"`
	MBps       float64 `json:"mb_per_s"`
}

// run is one transfer in progress.
type run struct {
	o        Options
	src, dst Endpoint
	ring     *ring
	nbuf     int
	readers  int
	writers  int
	small    sync.Pool
	limiter  *rate.Limiter
	third    *thirdParty // set for share-to-share copies

	files, dirs, bytes       atomic.Int64
	filesDone                atomic.Int64
	moved, skipped, verified atomic.Int64
	retries, corrupt, failed atomic.Int64
	walking                  atomic.Bool
	errMu                    sync.Mutex
	errs                     []error
}

func (x *run) limit(ctx context.Context, n int) {
	if x.limiter != nil {
		for n > 0 {
			k := min(n, x.limiter.Burst())
			// Reserve rather than WaitN: WaitN gives up at once when the
			// wait would pass ctx's deadline, and the cap would not hold.
			r := x.limiter.ReserveN(time.Now(), k)
			t := time.NewTimer(r.Delay())
			select {
			case <-ctx.Done():
				t.Stop()
				r.Cancel()
				return
			case <-t.C:
			}
			n -= k
		}
	}
}

func (x *run) failFile(err error) {
	x.failed.Add(1)
	x.errMu.Lock()
	x.errs = append(x.errs, err)
	x.errMu.Unlock()
}

// endpoint parses a command-line location: pando://domain/path, an
// http(s) URL, or a local path.
func endpoint(ctx context.Context, o Options, s string) (Endpoint, string, error) {
	switch {
	case strings.HasPrefix(s, "pando://"):
		gp := path.Clean(cleanGrid(s))
		var c *client.Client
		var err error
		switch {
		case o.GridAt != nil:
			c, err = o.GridAt(ctx, gp)
		case o.Grid != nil:
			c, err = o.Grid()
		default:
			return nil, "", fmt.Errorf("%s: no pando client is configured", s)
		}
		if err != nil {
			return nil, "", err
		}
		return grid{c}, gp, nil
	case strings.HasPrefix(s, "http://"), strings.HasPrefix(s, "https://"):
		return newWeb(), s, nil
	}
	p, err := filepath.Abs(s)
	return local{noSync: o.NoSync}, p, err
}

func baseOf(p string) string {
	if i := strings.LastIndexAny(strings.TrimRight(p, "/"), "/"); i >= 0 {
		p = strings.TrimRight(p, "/")[i+1:]
	}
	if j := strings.IndexAny(p, "?#"); j >= 0 {
		p = p[:j]
	}
	return p
}

// Copy copies srcs to dst, as cp does: several sources, or a source
// directory, go below dst; a single file may be renamed to dst.
func Copy(ctx context.Context, srcs []string, dst string, o Options) (Summary, error) {
	if o.Streams <= 0 {
		o.Streams = 4
	}
	if o.Block <= 0 {
		o.Block = 4 << 20
	}
	if o.Block > 16<<20 {
		return Summary{}, fmt.Errorf("a block of %d bytes is larger than the 16 MiB a request may carry", o.Block)
	}
	o.Retries = max(o.Retries, 0)
	if o.JournalDir == "" {
		o.JournalDir = JournalDir()
	}
	if o.Checkpoint <= 0 {
		o.Checkpoint = time.Second
	}
	dep, dp, err := endpoint(ctx, o, dst)
	if err != nil {
		return Summary{}, err
	}
	if _, ok := dep.(web); ok {
		return Summary{}, errReadOnly
	}
	dinfo, derr := dep.Stat(ctx, dp)
	if derr != nil && !isNotExist(derr) {
		return Summary{}, derr
	}
	if derr != nil {
		// The copy takes dst's name: the directory it goes in must exist.
		if err := parentExists(ctx, o, dep, dst, dp); err != nil {
			return Summary{}, err
		}
	}
	intoDir := derr == nil && dinfo.Dir
	if len(srcs) > 1 && !intoDir {
		return Summary{}, fmt.Errorf("%s is not a directory: copying %d sources needs a directory to put them in", dst, len(srcs))
	}
	start := time.Now()
	var total Summary
	for _, s := range srcs {
		sep, sp, err := endpoint(ctx, o, s)
		if err != nil {
			return total, err
		}
		in, err := sep.Stat(ctx, sp)
		if err != nil {
			if isNotExist(err) {
				return total, notFound(o, sep, s, sp)
			}
			return total, err
		}
		if in.Dir && !o.Recursive {
			return total, fmt.Errorf("%s is a directory; use -r to copy a tree", s)
		}
		target := dp
		if intoDir {
			target = dep.Join(dp, baseOf(sp))
		}
		x := newRun(o, sep, dep)
		// The clients the data may pass through: one, or two when the
		// paths lie in two domains.
		var gcs []*client.Client
		for _, e := range []Endpoint{sep, dep} {
			if g, ok := e.(grid); ok && !slices.Contains(gcs, g.c) {
				gcs = append(gcs, g.c)
			}
		}
		before := make([]int64, len(gcs))
		for i, c := range gcs {
			before[i] = c.DataBytes()
		}
		err = x.copyTop(ctx, sp, target, in, start)
		add(&total, x.summary())
		for i, c := range gcs {
			total.ClientData += c.DataBytes() - before[i]
		}
		total.ThirdParty = total.ThirdParty || x.third != nil
		if err != nil {
			return finish(total, start), err
		}
	}
	return finish(total, start), nil
}

// parentExists checks that the directory dst (dp at dep) would be made in
// exists, and says how to fix it when it does not.
func parentExists(ctx context.Context, o Options, dep Endpoint, dst, dp string) error {
	parent := path.Dir(dp)
	if pi, err := dep.Stat(ctx, parent); err == nil && pi.Dir {
		return nil
	} else if err == nil {
		return fmt.Errorf("cannot copy to %s: %s is not a directory", dst, dep.Name(parent))
	}
	if _, ok := dep.(grid); ok {
		if strings.Count(parent, "/") == 2 { // /DOMAIN/NAME: where shares are mounted
			return fmt.Errorf("cannot copy to %s: nothing is mounted at %s; `pando ls %s` lists what is", dst, dep.Name(parent), path.Dir(parent))
		}
		return fmt.Errorf("cannot copy to %s: %s does not exist; create it with `pando mkdir -p %s`, or see what is there with `pando ls %s`",
			dst, dep.Name(parent), parent, path.Dir(parent))
	}
	if err := gridLookalike(o, dst); err != nil {
		return err
	}
	return fmt.Errorf("cannot copy to %s: the directory %s does not exist; create it first (mkdir -p %s)", dst, parent, parent)
}

// notFound explains a source that does not exist.
func notFound(o Options, sep Endpoint, s, sp string) error {
	if _, ok := sep.(local); ok {
		if err := gridLookalike(o, s); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s does not exist", sep.Name(sp))
}

// gridLookalike returns an error suggesting pando:// when the local path s,
// which does not exist, begins with the name of the grid's domain
// ("uva/data/x" or "/uva/data/x" for pando://uva/data/x).
func gridLookalike(o Options, s string) error {
	if o.Grid == nil {
		return nil
	}
	c, err := o.Grid()
	if err != nil {
		return nil
	}
	dom := c.Domain()
	rel := strings.TrimPrefix(s, "/")
	if dom == "" || (rel != dom && !strings.HasPrefix(rel, dom+"/")) {
		return nil
	}
	first := dom // the path's first component, as a local path
	if strings.HasPrefix(s, "/") {
		first = "/" + dom
	}
	if _, err := os.Stat(first); err == nil {
		return nil // ./uva (or /uva) exists here: a local path after all
	}
	return fmt.Errorf("%s is taken as a local path, which does not exist; for the grid path write pando://%s", s, rel)
}

func finish(s Summary, start time.Time) Summary {
	s.Seconds = time.Since(start).Seconds()
	if s.Seconds > 0 {
		s.MBps = float64(s.Moved) / s.Seconds / 1e6
	}
	return s
}

func add(t *Summary, s Summary) {
	t.Files += s.Files
	t.Dirs += s.Dirs
	t.Bytes += s.Bytes
	t.Moved += s.Moved
	t.Skipped += s.Skipped
	t.Verified += s.Verified
	t.Retries += s.Retries
	t.Corrupt += s.Corrupt
	t.Failed += s.Failed
}

func remote(e Endpoint) bool { _, l := e.(local); return !l }

func newRun(o Options, src, dst Endpoint) *run {
	x := &run{o: o, src: src, dst: dst}
	// Blocks in flight: on a network side, client.InFlight (8 MiB per
	// stream, at least 16 MiB), two blocks on a disk.
	inflight := client.InFlight(o.Streams)
	net := min(max(2, (inflight+o.Block-1)/o.Block), 64)
	x.readers, x.writers = 2, 2
	if remote(src) {
		x.readers = net
	}
	if remote(dst) {
		x.writers = net
	}
	if s, ok := src.(grid); ok && !o.ViaClient {
		if d, ok := dst.(grid); ok {
			x.third = &thirdParty{c: s.c, dc: d.c, tokens: make(map[string]wire.ResolveResp)}
		}
	}
	x.nbuf = x.readers + x.writers + 4
	x.ring = newRing(x.nbuf, o.Block, x.nbuf/2)
	x.small.New = func() any { b := make([]byte, o.Block); return &b }
	if o.Rate > 0 {
		x.limiter = rate.NewLimiter(rate.Limit(o.Rate), max(o.Block, int(o.Rate/20)))
	}
	return x
}

func (x *run) summary() Summary {
	return Summary{Files: x.files.Load(), Dirs: x.dirs.Load(), Bytes: x.bytes.Load(), Moved: x.moved.Load(),
		Skipped: x.skipped.Load(), Verified: x.verified.Load(), Retries: x.retries.Load(),
		Corrupt: x.corrupt.Load(), Failed: x.failed.Load()}
}

// copyTop copies one source (a file or a tree) to target.
func (x *run) copyTop(ctx context.Context, sp, target string, in Info, start time.Time) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	smallCh := make(chan job, 1024)
	largeCh := make(chan job, 64)
	var workers sync.WaitGroup
	nsmall := 8
	if remote(x.src) || remote(x.dst) {
		nsmall = 32 * x.o.Streams
	}
	do := func(j job, fn func(context.Context, job) error) {
		if err := fn(ctx, j); err != nil {
			x.failFile(err)
		}
		x.filesDone.Add(1)
	}
	for range nsmall {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for j := range smallCh {
				do(j, x.copySmall)
			}
		}()
	}
	workers.Add(1)
	go func() {
		defer workers.Done()
		for j := range largeCh {
			do(j, x.copyLarge)
		}
	}()
	emit := func(j job) {
		x.files.Add(1)
		x.bytes.Add(j.in.Size)
		if j.in.Size <= int64(x.o.Block) {
			smallCh <- j
		} else {
			largeCh <- j
		}
	}
	stopProgress := x.progress(start)
	x.walking.Store(true)
	if in.Dir {
		var walkers sync.WaitGroup
		sem := make(chan struct{}, 16)
		var walk func(sp, dp string, in Info)
		walk = func(sp, dp string, in Info) {
			defer walkers.Done()
			sem <- struct{}{}
			err := x.dst.Mkdir(ctx, dp, in.Mode)
			var ents []Entry
			if err == nil {
				ents, err = x.src.List(ctx, sp)
			}
			<-sem
			if err != nil {
				x.failFile(err)
				return
			}
			x.dirs.Add(1)
			for _, e := range ents {
				if e.Dir {
					walkers.Add(1)
					go walk(x.src.Join(sp, e.Name), x.dst.Join(dp, e.Name), e.Info)
				} else {
					emit(job{sp: x.src.Join(sp, e.Name), dp: x.dst.Join(dp, e.Name), in: e.Info})
				}
			}
		}
		walkers.Add(1)
		walk(sp, target, in)
		walkers.Wait()
	} else {
		emit(job{sp: sp, dp: target, in: in})
	}
	x.walking.Store(false)
	close(smallCh)
	close(largeCh)
	workers.Wait()
	stopProgress()
	x.errMu.Lock()
	defer x.errMu.Unlock()
	switch len(x.errs) {
	case 0:
		return nil
	case 1:
		return x.errs[0]
	}
	return fmt.Errorf("%d of %d files failed; the first: %w", len(x.errs), x.files.Load(), errors.Join(x.errs[0]))
}

func (x *run) progress(start time.Time) func() {
	if x.o.Progress == nil {
		return func() {}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	report := func() {
		x.o.Progress(Progress{Files: x.filesDone.Load(), FilesTotal: x.files.Load(),
			Bytes: x.moved.Load() + x.skipped.Load(), BytesTotal: x.bytes.Load(),
			Elapsed: time.Since(start), Walking: x.walking.Load()})
	}
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				report()
				return
			case <-t.C:
				report()
			}
		}
	}()
	return func() { close(stop); <-done }
}
