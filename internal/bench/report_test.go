package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{59: "59", 325: "325", 0: "0", 3.5: "3.5", 12.25: "12.2", 348.4: "348", 0.1234: "0.123"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestReportQuick: counts print as integers, and a --quick run says so
// in the table and on its plots, whose axes are labelled with units.
func TestReportQuick(t *testing.T) {
	rows := []Row{
		{Scenario: "make", Case: "callback", Metric: "all RPCs", Value: 59, Unit: "calls", Quick: true},
		{Scenario: "make", Case: "strict", Metric: "all RPCs", Value: 120, Unit: "calls", Quick: true},
	}
	var rep Report
	rep.Add(rows...)
	var out bytes.Buffer
	if err := rep.Print(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "59 calls") || strings.Contains(out.String(), "59.0") || !strings.Contains(out.String(), "--quick") {
		t.Errorf("table:\n%s", out.String())
	}
	svg := makeChart(rows).svg()
	for _, want := range []string{"all RPCs (calls)", "consistency mode", quickNote} {
		if !strings.Contains(svg, want) {
			t.Errorf("the plot lacks %q", want)
		}
	}
	rows[0].Quick, rows[1].Quick = false, false
	if svg := makeChart(rows).svg(); strings.Contains(svg, quickNote) {
		t.Errorf("a plot of a full run says it is a quick one")
	}
	rep = Report{}
	rep.Add(rows...)
	out.Reset()
	rep.Print(&out)
	if strings.Contains(out.String(), "--quick") {
		t.Errorf("a full run's table says it is a quick one:\n%s", out.String())
	}
}
