package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/vfs"
)

// runRepoUpdate: a source tree read-shared by six agents; 540 of its files
// are updated at the share; every agent then looks at the whole tree again
// (GVFS section 5). The RPCs of that second look are the invalidation
// traffic: under poll they follow the update, under a window or strict
// they follow the tree.
func runRepoUpdate(ctx context.Context, o Options) ([]Row, error) {
	files, updated, agents := 14000, 540, 6
	if o.Quick {
		files, updated, agents = 700, 27, 3
	}
	period := time.Second
	modes := []string{"strict", fmt.Sprintf("window=%v", period), fmt.Sprintf("poll=%v", period), "callback"}
	var rows []Row
	for _, mode := range modes {
		c, err := consistency.Parse(mode)
		if err != nil {
			return nil, err
		}
		e, root, _, err := startWith(ctx, nil)
		if err != nil {
			return nil, err
		}
		repo := filepath.Join(root, "repo")
		for i := range files {
			dir := filepath.Join(repo, fmt.Sprintf("m%02d", i%50))
			if i < 50 {
				os.MkdirAll(dir, 0o755)
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d.c", i)), []byte("int x;\n"), 0o644); err != nil {
				e.Close()
				return nil, err
			}
		}
		var as []*Agent
		for range agents {
			a, err := e.Mount(vfs.Options{Consistency: c}, 0)
			if err != nil {
				e.Close()
				return nil, err
			}
			as = append(as, a)
		}
		o.say("repo-update: %d agents look at %d files, consistency %s", agents, files, mode)
		scan := func() (map[string]uint64, time.Duration, error) {
			before := make([]map[string]uint64, len(as))
			for i, a := range as {
				before[i] = a.Stats().RPCs
			}
			var wg sync.WaitGroup
			errs := make(chan error, len(as))
			t0 := time.Now()
			for _, a := range as {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n, err := walkFiles(a.Path("/bench/data/repo"))
					if err == nil && n != files {
						err = fmt.Errorf("an agent saw %d of %d files", n, files)
					}
					if err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			took := time.Since(t0)
			close(errs)
			if err := <-errs; err != nil {
				return nil, 0, err
			}
			delta := make(map[string]uint64)
			for i, a := range as {
				for k, v := range a.Stats().RPCs {
					if d := v - before[i][k]; d > 0 && k != "auth" && k != "resolve" && k != "ping" && k != "mount-list" {
						delta[k] += d
					}
				}
			}
			return delta, took, nil
		}
		if _, _, err := scan(); err != nil { // warm every cache
			e.Close()
			return nil, err
		}
		for i := 0; i < updated; i++ {
			k := i * (files / updated)
			p := filepath.Join(repo, fmt.Sprintf("m%02d", k%50), fmt.Sprintf("f%05d.c", k))
			if err := os.WriteFile(p, []byte("int x = 2; /* updated */\n"), 0o644); err != nil {
				e.Close()
				return nil, err
			}
		}
		time.Sleep(period + period/2) // past the window, and one poll
		delta, took, err := scan()
		e.Close()
		if err != nil {
			return nil, err
		}
		var total uint64
		for _, v := range delta {
			total += v
		}
		cs := fmt.Sprintf("%s, %d agents", mode, agents)
		rows = append(rows,
			Row{Scenario: "repo-update", Case: cs, Metric: "RPCs after the update", Value: float64(total), Unit: "calls",
				Ref: "files updated x agents", RefValue: float64(updated * agents), Note: opsNote(delta)},
			Row{Scenario: "repo-update", Case: cs, Metric: "time to look again", Value: took.Seconds() * 1000, Unit: "ms",
				Note: fmt.Sprintf("%d files, %d updated at the share", files, updated)})
	}
	return rows, nil
}
