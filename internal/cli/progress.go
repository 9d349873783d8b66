package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Progress shows bytes, rate and ETA of a transfer on a terminal, at most
// ten times a second; it prints nothing when out is not a terminal.
type Progress struct {
	mu    sync.Mutex
	out   io.Writer
	on    bool
	label string
	total int64
	done  int64
	start time.Time
	last  time.Time
}

// NewProgress starts a progress line for a transfer of total bytes (-1 if unknown).
func NewProgress(out *os.File, label string, total int64) *Progress {
	return &Progress{out: out, on: IsTerminal(out) && os.Getenv("CI") == "", label: label, total: total, start: time.Now()}
}

// Add records n more bytes.
func (p *Progress) Add(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += int64(n)
	if p.on && time.Since(p.last) > 100*time.Millisecond {
		p.last = time.Now()
		p.draw()
	}
}

func (p *Progress) draw() {
	el := time.Since(p.start).Seconds()
	rate := float64(p.done) / max(el, 1e-3)
	line := fmt.Sprintf("\r%s  %s", p.label, Size(p.done))
	if p.total > 0 {
		line += fmt.Sprintf(" / %s (%d%%)", Size(p.total), p.done*100/p.total)
	}
	line += fmt.Sprintf("  %s/s", Size(int64(rate)))
	if p.total > 0 && rate > 0 && p.done < p.total {
		eta := time.Duration(float64(p.total-p.done) / rate * float64(time.Second)).Round(time.Second)
		line += "  ETA " + eta.String()
	}
	fmt.Fprintf(p.out, "%-78s", line)
}

// Done ends the progress line.
func (p *Progress) Done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on {
		p.draw()
		fmt.Fprintln(p.out)
	}
}

// Writer wraps w so that writes count towards the progress.
func (p *Progress) Writer(w io.Writer) io.Writer { return progressWriter{w, p} }

// Reader wraps r so that reads count towards the progress.
func (p *Progress) Reader(r io.Reader) io.Reader { return progressReader{r, p} }

type progressWriter struct {
	w io.Writer
	p *Progress
}

func (pw progressWriter) Write(b []byte) (int, error) {
	n, err := pw.w.Write(b)
	pw.p.Add(n)
	return n, err
}

type progressReader struct {
	r io.Reader
	p *Progress
}

func (pr progressReader) Read(b []byte) (int, error) {
	n, err := pr.r.Read(b)
	pr.p.Add(n)
	return n, err
}
