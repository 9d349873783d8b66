package e2e

import (
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	// Every scenario, a few seconds each: minutes in all on a busy machine.
	res := runBench(t, 10*time.Minute, "bench", "all", "--quick", "--rtt", "0,5ms", "--rate", "1gbit", "--json", js, "--plot", plots).ok()
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
		// A quick run's CPU time of a server that only hands a file to
		// sendfile may be under the clock's tick (10 ms): 0 there.
		if row.Value <= 0 && row.Metric != "consistency RPCs" && row.Metric != "acquisitions min" && row.Metric != "operations failed" && !strings.HasSuffix(row.Metric, "round trips") &&
			!(row.Quick && strings.HasSuffix(row.Metric, "server CPU") && row.Value == 0) {
			t.Errorf("%s %s %s: value %v", row.Scenario, row.Case, row.Metric, row.Value)
		}
		if row.Ref != "" && row.RefValue <= 0 && !(row.Quick && strings.HasSuffix(row.Metric, "server CPU") && row.RefValue == 0) {
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
	// The walk's peers run where sshfs, rclone and sshd are installed
	// (./dev test installs them; in CI they must have run).
	_, errS := exec.LookPath("sshfs")
	_, errR := exec.LookPath("rclone")
	if os.Getenv("CI") != "" || (errS == nil && errR == nil) {
		for _, peer := range []string{"sshfs", "rclone mount"} {
			if !slices.ContainsFunc(rep.Rows, func(r bench.Row) bool { return r.Scenario == "walk" && strings.HasPrefix(r.Case, peer) }) {
				t.Errorf("the walk ran no %s beside pando", peer)
			}
		}
	}
	if !strings.Contains(res.stdout, "(--quick: small sizes, one run each") || strings.Contains(res.stdout, ".0 calls") {
		t.Errorf("the table does not say it comes from a --quick run, or counts have decimals:\n%s", res.stdout)
	}
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
		if !strings.Contains(string(b), "--quick: one small run") {
			t.Errorf("%s: a plot of a --quick run does not say so", p)
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

// runBench runs the CLI (no configuration) with a bound of its own.
func runBench(t *testing.T, bound time.Duration, args ...string) result {
	t.Helper()
	return runPandoFor(t, bound, "", "", args...)
}

// TestBenchMakeOrder runs make's modes in two orders and checks that each
// mode's RPCs do not depend on the mode run before it: an agent that
// stopped must leave nothing behind at the share (a callback session the
// next agent's changes wait for, a tree the share's watcher reports late)
// that changes what the next one sends. Compared: the kinds of request
// sent, and the counts the workload alone decides (creates, commits,
// listings); getattr, getinv, open and close also depend on when the
// share's watcher echoes the agent's own changes (one revalidation each,
// docs/consistency.md) and on the kernel's caches, so they are not. No
// time is compared: TestCloseEndsCallbackSession (vfs) checks the cause of
// the order's cost, a callback session left open.
func TestBenchMakeOrder(t *testing.T) {
	dir := t.TempDir()
	orders := [][]string{{"callback", "callback+back"}, {"callback+back", "callback"}}
	got := make([]map[string]map[string]uint64, len(orders))
	for i, modes := range orders {
		js := filepath.Join(dir, fmt.Sprintf("order%d.json", i))
		res := runBench(t, 3*time.Minute, "bench", "make", "--quick", "--modes", strings.Join(modes, ","), "--json", js).ok()
		if strings.Contains(res.stdout, ".0 calls") {
			t.Errorf("counts printed with decimals:\n%s", res.stdout)
		}
		rep, err := bench.ReadJSON(js)
		if err != nil {
			t.Fatal(err)
		}
		got[i] = map[string]map[string]uint64{}
		for _, row := range rep.Rows {
			if row.Metric != "all RPCs" {
				continue
			}
			if len(row.RPCs) == 0 {
				t.Fatalf("make %s: no RPC counts in %+v", row.Case, row)
			}
			var sum uint64
			for _, n := range row.RPCs {
				sum += n
			}
			if float64(sum) != row.Value || !row.Quick {
				t.Errorf("make %s: %v RPCs, the kinds add up to %d (quick %v)", row.Case, row.Value, sum, row.Quick)
			}
			got[i][row.Case] = row.RPCs
		}
	}
	for _, mode := range orders[0] {
		a, b := got[0][mode], got[1][mode]
		if a == nil || b == nil {
			t.Fatalf("mode %s missing from a run: %v / %v", mode, a, b)
		}
		// Polls and lease renewals (getinv) come with time, not with
		// the order of the runs: a slow machine may send one more.
		kinds := func(m map[string]uint64) []string {
			var out []string
			for k := range m {
				if k != "getinv" {
					out = append(out, k)
				}
			}
			slices.Sort(out)
			return out
		}
		if !slices.Equal(kinds(a), kinds(b)) {
			t.Errorf("make %s sends other kinds of request depending on the order: %v first, %v second", mode, kinds(a), kinds(b))
		}
		for _, k := range []string{"create", "commit", "readdir", "mkdir", "unlink", "rename", "write"} {
			if a[k] != b[k] {
				t.Errorf("make %s: %d %s requests run first, %d run second", mode, a[k], k, b[k])
			}
		}
	}
}
