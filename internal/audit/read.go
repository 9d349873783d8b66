package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// MaxLine bounds a line the reader takes; a longer one is skipped.
const MaxLine = 64 << 10

// Errors of Decode.
var (
	// ErrNotRecord: the line is not a JSON object of a record (no time,
	// action or result, or not JSON at all).
	ErrNotRecord = errors.New("not an audit record")
	// ErrLineTooLong: the line is longer than MaxLine.
	ErrLineTooLong = errors.New("line too long")
)

// Decode reads one line of a log (without its newline). The line may come
// from an edited file: anything but a JSON object with a time, an action
// and a result is ErrNotRecord; fields it does not know are ignored.
func Decode(line []byte) (Record, error) {
	if len(line) > MaxLine {
		return Record{}, ErrLineTooLong
	}
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return Record{}, fmt.Errorf("%w: a record is a JSON object on one line", ErrNotRecord)
	}
	var r Record
	d := json.NewDecoder(bytes.NewReader(line))
	if err := d.Decode(&r); err != nil {
		return Record{}, fmt.Errorf("%w: %v", ErrNotRecord, err)
	}
	if d.More() {
		return Record{}, fmt.Errorf("%w: more than one JSON value on the line", ErrNotRecord)
	}
	if r.Time.IsZero() || r.Action == "" || r.Result == "" {
		return Record{}, fmt.Errorf("%w: it has no time, action or result", ErrNotRecord)
	}
	return r, nil
}

// Filter selects records; a zero field selects all.
type Filter struct {
	Since  time.Time
	Who    string // a principal ("alice@uva"), or a name without domain ("alice": of any domain)
	Path   string // a path and what is below it
	Domain string // the domain that decided
	Action string
}

// Match reports whether r passes f.
func (f Filter) Match(r Record) bool {
	switch {
	case !f.Since.IsZero() && r.Time.Before(f.Since):
		return false
	case f.Who != "" && r.Who != f.Who && !(!strings.Contains(f.Who, "@") && strings.HasPrefix(r.Who, f.Who+"@")):
		return false
	case f.Path != "" && !under(r.Path, f.Path):
		return false
	case f.Domain != "" && r.Domain != f.Domain:
		return false
	case f.Action != "" && r.Action != f.Action:
		return false
	}
	return true
}

// under reports whether p is prefix or below it, as paths ("/uva/data"
// covers "/uva/data/x", not "/uva/database"); a share's relative paths
// match a prefix given with or without its leading slash.
func under(p, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix == "" {
		return true
	}
	for _, q := range []string{p, "/" + p} {
		if q == prefix || strings.HasPrefix(q, prefix+"/") {
			return true
		}
	}
	return false
}

// Warning is a line a reader skipped.
type Warning struct {
	File string
	Line int
	Err  error
}

func (w Warning) Error() string { return fmt.Sprintf("%s:%d: skipped: %v", w.File, w.Line, w.Err) }

// ReadFile reads the records of one file that pass f; the lines it skips
// go to warn.
func ReadFile(path string, f Filter, warn func(Warning)) ([]Record, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return read(fh, path, f, warn)
}

func read(rd io.Reader, name string, f Filter, warn func(Warning)) ([]Record, error) {
	br := bufio.NewReaderSize(rd, 64<<10)
	var out []Record
	for n := 1; ; n++ {
		line, long, err := readLine(br)
		if err == io.EOF && len(line) == 0 && !long {
			return out, nil
		}
		if err != nil && err != io.EOF {
			return out, fmt.Errorf("cannot read the audit log %s: %w", name, err)
		}
		if !long && len(bytes.TrimSpace(line)) == 0 {
			if err == io.EOF {
				return out, nil
			}
			continue // a blank line says nothing
		}
		r, derr := Decode(line)
		if long {
			derr = ErrLineTooLong
		}
		if derr != nil {
			warn(Warning{File: name, Line: n, Err: derr})
		} else if f.Match(r) {
			out = append(out, r)
		}
		if err == io.EOF {
			return out, nil
		}
	}
}

// readLine reads one line without its newline; one longer than MaxLine is
// read to its end and reported long (its text dropped).
func readLine(br *bufio.Reader) (line []byte, long bool, err error) {
	for {
		frag, err := br.ReadSlice('\n')
		if !long {
			line = append(line, frag...)
			if len(line) > MaxLine+1 {
				long, line = true, nil
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), long, err
	}
}

// Read reads the logs in the state directories dirs (each FileName.1,
// then FileName), merged in order of time, keeping those that pass f.
// A directory without a log is skipped; found says how many files were
// read.
func Read(dirs []string, f Filter, warn func(Warning)) (recs []Record, found int, err error) {
	for _, d := range dirs {
		for _, name := range []string{FileName + ".1", FileName} {
			p := filepath.Join(d, name)
			rs, err := ReadFile(p, f, warn)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, found, err
			}
			found++
			recs = append(recs, rs...)
		}
	}
	slices.SortStableFunc(recs, func(a, b Record) int { return a.Time.Compare(b.Time) })
	return recs, found, nil
}

// ParseSince reads a --since: a duration back from now ("1h", "90m") or a
// time in RFC 3339 ("2026-12-02T04:00:00Z").
func ParseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			d = -d
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--since %q is neither a duration (90m, 24h) nor a time in RFC 3339 (2026-12-02T04:00:00Z)", s)
}

// StateDirs are the directories where the logs of a state directory may
// be: the directory itself (a controller's or a share's) and, for the
// state directory of pando up, its controller and shares directories.
func StateDirs(state string) []string {
	return []string{state, filepath.Join(state, "controller"), filepath.Join(state, "shares")}
}
