package e2e

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/bench"
)

// TestBenchQuick runs every scenario at its quick sizes through the binary
// and checks that the table, the JSON and the plots come out whole. No
// timing is asserted: the figures are for people.
func TestBenchQuick(t *testing.T) {
	dir := t.TempDir()
	js := filepath.Join(dir, "results.json")
	plots := filepath.Join(dir, "plots")
	// Two minutes on an idle machine; a loaded one takes longer.
	res := runPandoWithin(t, 5*time.Minute, "", "", "bench", "all", "--quick", "--rtt", "0,5ms", "--rate", "1gbit", "--json", js, "--plot", plots).ok()
	rep, err := bench.ReadJSON(js)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	lock := map[string]bench.Row{}
	for _, row := range rep.Rows {
		seen[row.Scenario]++
		// Under a weak mode one agent may get every acquisition; no
		// operation should fail without a controller.
		// A walk again may cost no round trip at all.
		if row.Value <= 0 && row.Metric != "consistency RPCs" && row.Metric != "acquisitions min" && row.Metric != "operations failed" && !strings.HasSuffix(row.Metric, "round trips") {
			t.Errorf("%s %s %s: value %v", row.Scenario, row.Case, row.Metric, row.Value)
		}
		if row.Ref != "" && row.RefValue <= 0 {
			t.Errorf("%s %s %s: reference %q has value %v", row.Scenario, row.Case, row.Metric, row.Ref, row.RefValue)
		}
		if row.Metric == "bytes fetched" && row.Value != 1 {
			t.Errorf("contention %s: %v copies fetched, want exactly one", row.Case, row.Value)
		}
		if row.Scenario == "lock" {
			lock[row.Case+" "+row.Metric] = row
		}
		if !strings.Contains(res.stdout, row.Scenario) || !strings.Contains(res.stdout, row.Case) {
			t.Errorf("table lacks %s %s", row.Scenario, row.Case)
		}
	}
	for _, name := range bench.Names() {
		if seen[name] == 0 {
			t.Errorf("scenario %s produced no rows", name)
		}
	}
	checkLock(t, lock)
	pngs, _ := filepath.Glob(filepath.Join(plots, "*.png"))
	svgs, _ := filepath.Glob(filepath.Join(plots, "*.svg"))
	if len(pngs) == 0 || len(pngs) != len(svgs) {
		t.Fatalf("%d PNG and %d SVG plots", len(pngs), len(svgs))
	}
	for _, p := range pngs {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil || img.Bounds().Dx() < 100 {
			t.Errorf("%s: not a plot: %v", p, err)
		}
	}
	for _, p := range svgs {
		b, _ := os.ReadFile(p)
		if !strings.HasPrefix(string(b), "<svg") || !strings.Contains(string(b), "</svg>") {
			t.Errorf("%s: not an SVG", p)
		}
	}
	runPando(t, "", "", "bench", "nosuch").fails(2, "no benchmark scenario", "read")
}

// checkLock checks the lock scenario's rows: every mode reports every
// figure, the acquisitions add up, and under the modes that promise fresh
// data after the lock is taken (strict, callback) the counter updated
// under the lock equals the number of acquisitions. No figure is timed.
func checkLock(t *testing.T, rows map[string]bench.Row) {
	t.Helper()
	metrics := []string{"fairness", "acquisitions min", "acquisitions max", "time to acquire mean",
		"time to acquire p99", "total time", "counter", "consistency RPCs", "all RPCs"}
	for _, mode := range []string{"callback", "strict", "window=3s", "poll=30s"} {
		for _, m := range metrics {
			if _, ok := rows[mode+" "+m]; !ok {
				t.Errorf("lock %s: no %q row", mode, m)
			}
		}
		counter := rows[mode+" counter"]
		n := counter.RefValue // acquisitions
		if n < 1 {
			t.Errorf("lock %s: %v acquisitions", mode, n)
			continue
		}
		if counter.Value > n || (mode == "callback" || mode == "strict") && counter.Value != n {
			t.Errorf("lock %s: the counter says %v after %v acquisitions", mode, counter.Value, n)
		}
		lo, hi := rows[mode+" acquisitions min"], rows[mode+" acquisitions max"]
		if lo.Value > hi.Value || hi.Value > n || hi.Value*6 < n {
			t.Errorf("lock %s: %v..%v acquisitions per agent of %v", mode, lo.Value, hi.Value, n)
		}
		if f := rows[mode+" fairness"].Value; f < 1.0/6-1e-9 || f > 1+1e-9 {
			t.Errorf("lock %s: Jain's index %v out of [1/6, 1]", mode, f)
		}
	}
}
