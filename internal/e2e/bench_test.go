package e2e

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pando.dev/pando/internal/bench"
)

// TestBenchQuick runs every scenario at its quick sizes through the binary
// and checks that the table, the JSON and the plots come out whole. No
// timing is asserted: the figures are for people.
func TestBenchQuick(t *testing.T) {
	dir := t.TempDir()
	js := filepath.Join(dir, "results.json")
	plots := filepath.Join(dir, "plots")
	res := runPando(t, "", "", "bench", "all", "--quick", "--rtt", "0,5ms", "--rate", "1gbit", "--json", js, "--plot", plots).ok()
	rep, err := bench.ReadJSON(js)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, row := range rep.Rows {
		seen[row.Scenario]++
		if row.Value <= 0 && row.Metric != "consistency RPCs" {
			t.Errorf("%s %s %s: value %v", row.Scenario, row.Case, row.Metric, row.Value)
		}
		if row.Ref != "" && row.RefValue <= 0 {
			t.Errorf("%s %s %s: reference %q has value %v", row.Scenario, row.Case, row.Metric, row.Ref, row.RefValue)
		}
		if row.Metric == "bytes fetched" && row.Value != 1 {
			t.Errorf("contention %s: %v copies fetched, want exactly one", row.Case, row.Value)
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
