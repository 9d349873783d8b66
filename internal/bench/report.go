package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"
)

// Row is one figure beside its reference, measured in the same run.
type Row struct {
	Scenario string  `json:"scenario"`
	Case     string  `json:"case"`
	Metric   string  `json:"metric"` // what Value measures, e.g. "cold read"
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Ref      string  `json:"reference,omitempty"` // what RefValue measures, e.g. "local disk"
	RefValue float64 `json:"reference_value,omitempty"`
	// HigherBetter says how to read the ratio (throughput) or not (latency).
	HigherBetter bool   `json:"higher_is_better"`
	Note         string `json:"note,omitempty"`
	// Quick: measured by a --quick run (small sizes, one run): a smoke
	// test, not a figure to compare.
	Quick bool `json:"quick,omitempty"`
	// RPCs counts the requests by kind, for the rows that count them.
	RPCs map[string]uint64 `json:"rpcs,omitempty"`
}

// Ratio is Value / RefValue (0 without a reference).
func (r Row) Ratio() float64 {
	if r.RefValue == 0 {
		return 0
	}
	return r.Value / r.RefValue
}

// Report holds the rows of one run.
type Report struct {
	Rows []Row `json:"rows"`
}

// Add appends rows.
func (r *Report) Add(rows ...Row) { r.Rows = append(r.Rows, rows...) }

// Print writes the rows as a table.
func (r *Report) Print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tCASE\tMETRIC\tPANDO\tREFERENCE\tREF VALUE\tRATIO\tNOTE")
	quick := false
	for _, row := range r.Rows {
		quick = quick || row.Quick
		ref, ratio := "-", "-"
		if row.Ref != "" {
			ref = fmt.Sprintf("%s %s", num(row.RefValue), row.Unit)
			ratio = fmt.Sprintf("%.2f", row.Ratio())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s %s\t%s\t%s\t%s\t%s\n", row.Scenario, row.Case, row.Metric, num(row.Value), row.Unit,
			orDash(row.Ref), ref, ratio, row.Note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if quick {
		_, err := fmt.Fprintln(w, "(--quick: small sizes, one run each; a smoke test, not figures to compare)")
		return err
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// num renders a value: whole numbers (counts) as integers, others with
// three significant digits.
func num(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return fmt.Sprintf("%.0f", v)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// WriteJSON writes the raw results.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadJSON reads what WriteJSON wrote.
func ReadJSON(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s is not a pando bench report: %w", path, err)
	}
	return &r, nil
}

// groups splits rows by scenario and metric: one plot each.
func (r *Report) groups() map[string][]Row {
	g := make(map[string][]Row)
	for _, row := range r.Rows {
		k := row.Scenario + "-" + strings.ReplaceAll(row.Metric, " ", "-")
		g[k] = append(g[k], row)
	}
	return g
}
