package bench

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// A bar chart per scenario and metric: for each case, pando's bar beside
// its reference's, on a linear axis from zero, with the values written on
// the bars. SVG for documents, PNG for a quick look.

const (
	plotW, plotH     = 900, 420
	marginL, marginR = 70, 20
	marginT, marginB = 40, 80
)

var (
	colPando = color.RGBA{0x1f, 0x77, 0xb4, 0xff}
	colRef   = color.RGBA{0xaa, 0xaa, 0xaa, 0xff}
	colText  = color.RGBA{0x22, 0x22, 0x22, 0xff}
	colGrid  = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
)

type bar struct {
	label    string
	val, ref float64
	hasRef   bool
}

type chart struct {
	title, unit, refName string
	xLabel, yLabel       string // the axes' labels, the y axis's with its unit
	quick                string // a note when the figures come from a --quick run
	bars                 []bar
	max                  float64
	w                    int // width in pixels: wider for many bars
}

// slot is the width of one case's pair of bars.
func (c chart) slot() float64 { return float64(c.w-marginL-marginR) / float64(len(c.bars)) }

// wrap splits a case label into lines that fit its slot (7 pixels a
// character), at most three.
func (c chart) wrap(label string) []string {
	width := max(4, int(c.slot()/7)-1)
	var out []string
	cur := ""
	for _, w := range strings.Fields(label) {
		switch {
		case cur == "":
			cur = w
		case len(cur)+1+len(w) <= width:
			cur += " " + w
		default:
			out = append(out, cur)
			cur = w
		}
	}
	out = append(out, cur)
	if len(out) > 3 {
		out = append(out[:2], strings.Join(out[2:], " "))
	}
	return out
}

// caseAxes names what the cases of a scenario are, for the x axis.
var caseAxes = map[string]string{
	"make": "consistency mode", "lock": "consistency mode", "repo-update": "consistency mode",
	"read": "file size", "readers": "concurrent readers",
}

// quickNote marks a plot of a --quick run.
const quickNote = "--quick: one small run, not a measurement"

func makeChart(rows []Row) chart {
	c := chart{title: rows[0].Scenario + ": " + rows[0].Metric, unit: rows[0].Unit,
		xLabel: "case", yLabel: rows[0].Metric + " (" + rows[0].Unit + ")"}
	if l, ok := caseAxes[rows[0].Scenario]; ok {
		c.xLabel = l
	}
	for _, r := range rows {
		if r.Quick {
			c.quick = quickNote
		}
		b := bar{label: r.Case, val: r.Value, ref: r.RefValue, hasRef: r.Ref != ""}
		if b.hasRef {
			c.refName = r.Ref
		}
		c.bars = append(c.bars, b)
		c.max = math.Max(c.max, math.Max(r.Value, r.RefValue))
	}
	if c.max <= 0 {
		c.max = 1
	}
	c.max *= 1.12
	c.w = max(plotW, marginL+marginR+80*len(c.bars))
	return c
}

// geometry of bar i: x of the pando bar, width of one bar.
func (c chart) geom(i int) (x0, w float64) {
	slot := c.slot()
	w = math.Min(slot*0.38, 60)
	return float64(marginL) + slot*float64(i) + slot/2 - w, w
}

func (c chart) y(v float64) float64 {
	return float64(marginT) + float64(plotH-marginT-marginB)*(1-v/c.max)
}

// Plot writes one SVG and one PNG per scenario and metric into dir.
func (r *Report) Plot(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	keys := make([]string, 0)
	groups := r.groups()
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c := makeChart(groups[k])
		svg := filepath.Join(dir, k+".svg")
		if err := os.WriteFile(svg, []byte(c.svg()), 0o644); err != nil {
			return files, err
		}
		pngPath := filepath.Join(dir, k+".png")
		if err := c.png(pngPath); err != nil {
			return files, err
		}
		files = append(files, svg, pngPath)
	}
	return files, nil
}

func (c chart) svg() string {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", c.w, plotH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", marginL, esc(c.title))
	if c.quick != "" {
		fmt.Fprintf(&b, `<text x="%d" y="22" text-anchor="end" fill="#b22">%s</text>`+"\n", c.w-marginR, esc(c.quick))
	}
	for i := 0; i <= 4; i++ {
		v := c.max / 1.12 * float64(i) / 4
		y := c.y(v)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", marginL, c.w-marginR, y, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", marginL-6, y+4, num(v))
	}
	fmt.Fprintf(&b, `<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">%s</text>`+"\n", plotH/2, plotH/2, esc(c.yLabel))
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" font-style="italic">%s</text>`+"\n", (marginL+c.w-marginR)/2, plotH-8, esc(c.xLabel))
	for i, br := range c.bars {
		x, w := c.geom(i)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#1f77b4"/>`+"\n", x, c.y(br.val), w, c.y(0)-c.y(br.val))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%s</text>`+"\n", x+w/2, c.y(br.val)-3, num(br.val))
		if br.hasRef {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#aaa"/>`+"\n", x+w, c.y(br.ref), w, c.y(0)-c.y(br.ref))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%s</text>`+"\n", x+1.5*w, c.y(br.ref)-3, num(br.ref))
		}
		for k, line := range c.wrap(br.label) {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x+w, plotH-marginB+16+13*k, esc(line))
		}
	}
	ly := plotH - 30
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="#1f77b4"/><text x="%d" y="%d">pando</text>`+"\n", marginL, ly, marginL+18, ly+11)
	if c.refName != "" {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="#aaa"/><text x="%d" y="%d">%s</text>`+"\n", marginL+90, ly, marginL+108, ly+11, esc(c.refName))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func (c chart) png(path string) error {
	img := image.NewRGBA(image.Rect(0, 0, c.w, plotH))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	rect := func(x0, y0, x1, y1 float64, col color.Color) {
		draw.Draw(img, image.Rect(int(x0), int(y0), int(x1), int(y1)), &image.Uniform{col}, image.Point{}, draw.Src)
	}
	text := func(x, y float64, s string, center bool) {
		d := &font.Drawer{Dst: img, Src: &image.Uniform{colText}, Face: basicfont.Face7x13}
		if center {
			x -= float64(d.MeasureString(s).Round()) / 2
		}
		d.Dot = fixed.P(int(x), int(y))
		d.DrawString(s)
	}
	text(marginL, 22, c.title, false)
	if c.quick != "" {
		d := &font.Drawer{Face: basicfont.Face7x13}
		text(float64(c.w-marginR-d.MeasureString(c.quick).Round()), 22, c.quick, false)
	}
	for i := 0; i <= 4; i++ {
		v := c.max / 1.12 * float64(i) / 4
		y := c.y(v)
		rect(marginL, y, float64(c.w-marginR), y+1, colGrid)
		s := num(v)
		text(float64(marginL-8-7*len(s)), y+4, s, false)
	}
	text(4, float64(marginT-4), c.yLabel, false)
	text(float64(marginL+c.w-marginR)/2, float64(plotH-8), c.xLabel, true)
	for i, br := range c.bars {
		x, w := c.geom(i)
		rect(x, c.y(br.val), x+w, c.y(0), colPando)
		text(x+w/2, c.y(br.val)-3, num(br.val), true)
		if br.hasRef {
			rect(x+w, c.y(br.ref), x+2*w, c.y(0), colRef)
			text(x+1.5*w, c.y(br.ref)-3, num(br.ref), true)
		}
		for k, line := range c.wrap(br.label) {
			text(x+w, float64(plotH-marginB+16+13*k), line, true)
		}
	}
	ly := float64(plotH - 30)
	rect(marginL, ly, marginL+12, ly+12, colPando)
	text(marginL+18, ly+11, "pando", false)
	if c.refName != "" {
		rect(marginL+90, ly, marginL+102, ly+12, colRef)
		text(marginL+108, ly+11, c.refName, false)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
