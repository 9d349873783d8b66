package bench

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/vfs"
	"pando.dev/pando/internal/wan"
)

// walkTree is the tree of the walk scenario: top directories under the
// root, each with subs subdirectories, files small files in every one of
// them.
type walkTree struct{ top, subs, files int }

func (t walkTree) dirs() int  { return t.top * (1 + t.subs) }
func (t walkTree) total() int { return t.dirs() * t.files }

func (t walkTree) build(root string) error {
	for i := range t.top {
		top := filepath.Join(root, fmt.Sprintf("d%02d", i))
		dirs := []string{top}
		for j := range t.subs {
			dirs = append(dirs, filepath.Join(top, fmt.Sprintf("s%02d", j)))
		}
		for _, d := range dirs {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			for k := range t.files {
				if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d.c", k)), []byte("int x;\n"), 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// walkFiles does what `find DIR -type f | xargs stat` does: list every
// directory and stat every entry. It returns the files seen.
func walkFiles(root string) (int, error) {
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if _, err := os.Lstat(p); err != nil {
			return err
		}
		if !d.IsDir() {
			n++
		}
		return nil
	})
	return n, err
}

// walkModes are the consistency modes the walk scenario compares; strict,
// a round trip per file, only when asked for (--modes strict).
var walkModes = []string{"window=3s", "poll=3s", "callback", "immutable"}

// runWalk: a tree of 2,000 small files in 100 directories (20,000 in
// 2,000 with Big; 200 in 20 with Quick, and windows of a second) read
// through a mount at several RTTs (Quick: the first only, by default
// 40 ms), per consistency mode: the first walk on a fresh agent, the same
// walk again at once, again after the mode's window has passed, and at
// once after the agent was restarted on the same cache, with the round
// trips of each by kind (after restart: from the agent's start).
func runWalk(ctx context.Context, o Options) ([]Row, error) {
	tree := walkTree{top: 10, subs: 9, files: 20}
	if o.Big {
		tree = walkTree{top: 20, subs: 99, files: 10}
	}
	modes := walkModes
	if o.Quick && !o.Big {
		// In seconds: a tenth of the tree, windows of a second.
		tree = walkTree{top: 4, subs: 4, files: 10}
		modes = []string{"window=1s", "poll=1s", "callback"}
	}
	modes = o.modes(modes)
	rtts := o.RTTs
	if len(rtts) == 0 {
		rtts = []time.Duration{0, 10 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond}
		if o.Quick {
			rtts = []time.Duration{40 * time.Millisecond}
		}
	}
	if o.Quick {
		rtts = rtts[:1] // each RTT takes a few seconds a mode
	}
	var rows []Row
	for _, rtt := range rtts {
		e, root, _, err := startWith(ctx, &wan.Config{RTT: rtt, Rate: o.Rate})
		if err != nil {
			return nil, err
		}
		r, err := walkAt(ctx, o, e, root, tree, rtt, modes)
		if err == nil {
			// The same tree through sshfs and rclone mount, where installed.
			peerTree := filepath.Join(root, "peers")
			var peers []Row
			if err = tree.build(peerTree); err == nil {
				peers, err = walkPeers(ctx, o, e.Dir, peerTree, tree, rtt)
			}
			besidePeer(r, peers)
			rows = append(append(rows, r...), peers...)
		}
		e.Close()
		if err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// besidePeer gives each timed row of pando's walks sshfs's figure for the
// same walk as its reference (rclone's when sshfs did not run).
func besidePeer(rows, peers []Row) {
	ref := map[string]Row{}
	for _, p := range peers {
		if _, ok := ref[p.Metric]; !ok || strings.HasPrefix(p.Case, "sshfs") {
			ref[p.Metric] = p
		}
	}
	for i, r := range rows {
		if p, ok := ref[r.Metric]; ok && r.Unit == "ms" {
			rows[i].Ref, rows[i].RefValue = strings.SplitN(p.Case, ",", 2)[0], p.Value
		}
	}
}

func walkAt(ctx context.Context, o Options, e *Env, root string, tree walkTree, rtt time.Duration, modes []string) ([]Row, error) {
	var rows []Row
	for i, mode := range modes {
		c, err := consistency.Parse(mode)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprint("tree", i)
		if err := tree.build(filepath.Join(root, name)); err != nil {
			return nil, err
		}
		a, err := e.Mount(vfs.Options{Consistency: c}, 0)
		if err != nil {
			return nil, err
		}
		look := func(what string, before map[string]uint64, note string) error {
			o.say("walk: %d files in %d directories, rtt %v, %s: %s", tree.total(), tree.dirs(), rtt, mode, what)
			top := a.Path("/bench/data/" + name)
			if before == nil {
				before = a.Stats().RPCs
			}
			t0 := time.Now()
			n, err := walkFiles(top)
			took := time.Since(t0)
			if err == nil && n != tree.total() {
				err = fmt.Errorf("the walk saw %d of %d files", n, tree.total())
			}
			if err != nil {
				return fmt.Errorf("walk %s, %s: %w", mode, what, err)
			}
			delta := make(map[string]uint64)
			var total uint64
			for k, v := range a.Stats().RPCs {
				if d := v - before[k]; d > 0 && k != "auth" && k != "resolve" && k != "ping" && k != "mount-list" {
					delta[k] = d
					total += d
				}
			}
			cs := fmt.Sprintf("%s, rtt %v", mode, rtt)
			rows = append(rows,
				Row{Scenario: "walk", Case: cs, Metric: what, Value: took.Seconds() * 1000, Unit: "ms",
					Note: fmt.Sprintf("%d files, %d directories%s", tree.total(), tree.dirs(), note)},
				Row{Scenario: "walk", Case: cs, Metric: what + ": round trips", Value: float64(total), Unit: "calls",
					Note: opsNote(delta)})
			return nil
		}
		err = look("first walk", nil, "")
		if err == nil {
			err = look("again at once", nil, "")
		}
		if err == nil {
			wait := 3 * time.Second // as long as the default window
			if o.Quick {
				wait = time.Second
			}
			if c.Period > 0 {
				wait = c.Period
			}
			time.Sleep(wait + 500*time.Millisecond)
			err = look("after the window", nil, "")
		}
		if err == nil {
			// The agent restarted on its cache, the tree walked at once:
			// its round trips count from the agent's start (the
			// validation of what it persisted, the first poll).
			t0 := time.Now()
			a, err = e.Restart(a)
			if err != nil {
				return nil, err
			}
			started := time.Since(t0)
			err = look("after restart", map[string]uint64{}, fmt.Sprintf("; stopping and starting the agent took %.0f ms", started.Seconds()*1000))
		}
		a.Unmount()
		if err != nil {
			return nil, err
		}
	}
	return rows, nil
}
