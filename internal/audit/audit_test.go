package audit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func open(t *testing.T, opt Options) (*Log, string) {
	t.Helper()
	dir := t.TempDir()
	l, err := Open(filepath.Join(dir, FileName), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, dir
}

func readAll(t *testing.T, dir string, f Filter) ([]Record, []Warning) {
	t.Helper()
	var ws []Warning
	recs, _, err := Read([]string{dir}, f, func(w Warning) { ws = append(ws, w) })
	if err != nil {
		t.Fatal(err)
	}
	return recs, ws
}

func TestWriteRead(t *testing.T) {
	l, dir := open(t, Options{Server: "controller@uva", Domain: "uva"})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				l.Write(Record{Who: fmt.Sprintf("u%d@uva", i), Action: "resolve", Path: fmt.Sprintf("/uva/data/%d", j), Rights: "rl", Result: Granted, From: "10.0.0.1:5"})
			}
		}()
	}
	wg.Wait()
	l.Write(Record{Who: "bob@tacc", Action: "open", Path: "x/y", Rights: "w", Result: Refused, Domain: "tacc", Detail: "bob@tacc lacks\nthe write right"})
	l.Flush()
	recs, ws := readAll(t, dir, Filter{})
	if len(ws) != 0 || len(recs) != 401 {
		t.Fatalf("read %d records, %d warnings; want 401, 0", len(recs), len(ws))
	}
	b, _ := os.ReadFile(filepath.Join(dir, FileName))
	if n := strings.Count(string(b), "\n"); n != 401 {
		t.Fatalf("%d lines in the file, want one a record (401)", n)
	}
	last := recs[len(recs)-1]
	if last.Server != "controller@uva" || last.Domain != "tacc" || last.Detail != "bob@tacc lacks\nthe write right" || last.Time.IsZero() {
		t.Fatalf("last record %+v", last)
	}
	for _, c := range []struct {
		f    Filter
		want int
	}{
		{Filter{Who: "u3@uva"}, 50},
		{Filter{Who: "u3"}, 50},
		{Filter{Who: "bob"}, 1},
		{Filter{Path: "/uva/data/1"}, 8},
		{Filter{Path: "/uva/data"}, 400},
		{Filter{Path: "/uva/dat"}, 0},
		{Filter{Path: "x"}, 1},
		{Filter{Path: "/x/y"}, 1},
		{Filter{Domain: "tacc"}, 1},
		{Filter{Domain: "uva", Action: "resolve"}, 400},
		{Filter{Action: "open"}, 1},
		{Filter{Since: time.Now().Add(time.Hour)}, 0},
		{Filter{Since: time.Now().Add(-time.Hour)}, 401},
	} {
		if got, _ := readAll(t, dir, c.f); len(got) != c.want {
			t.Errorf("filter %+v: %d records, want %d", c.f, len(got), c.want)
		}
	}
}

func TestNilLog(t *testing.T) {
	var l *Log
	l.Write(Record{Action: "x", Result: Granted})
	l.Flush()
	if l.Dropped() != 0 || l.Close() != nil {
		t.Fatal("a nil log does something")
	}
}

// TestFullQueueDrops holds the writer up (the file's directory made
// unwritable cannot stop an append; a queue of 1 and a burst can):
// records beyond the queue are dropped, never waited for, and one record
// says how many.
func TestFullQueueDrops(t *testing.T) {
	l, dir := open(t, Options{Queue: 1})
	const n = 20000
	start := time.Now()
	for i := range n {
		l.Write(Record{Action: "open", Result: Refused, Path: fmt.Sprint(i)})
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("%d writes took %v: Write waited for the file", n, d)
	}
	l.Flush()
	recs, ws := readAll(t, dir, Filter{})
	if len(ws) != 0 {
		t.Fatal(ws)
	}
	kept, dropped := 0, 0
	for _, r := range recs {
		if r.Action == ActionDropped {
			var k int
			if _, err := fmt.Sscanf(r.Detail, "%d audit records were dropped", &k); err != nil || r.Result != Noted {
				t.Fatalf("dropped record %+v", r)
			}
			dropped += k
		} else {
			kept++
		}
	}
	if dropped == 0 {
		t.Fatalf("a queue of 1 took %d records in a burst and dropped none", n)
	}
	if kept+dropped != n {
		t.Fatalf("%d kept + %d said dropped != %d written", kept, dropped, n)
	}
	if l.Dropped() != 0 {
		t.Fatalf("%d drops not yet reported after Flush", l.Dropped())
	}
}

func TestRotation(t *testing.T) {
	const max = 8 << 10
	l, dir := open(t, Options{MaxSize: max})
	for i := range 1000 {
		l.Write(Record{Action: "resolve", Result: Granted, Path: fmt.Sprintf("/uva/data/%04d", i)})
		if i%100 == 0 {
			l.Flush()
		}
	}
	l.Flush()
	var total int64
	for _, name := range []string{FileName, FileName + ".1"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > max/2 {
			t.Errorf("%s holds %d bytes, over half the bound %d", name, st.Size(), max)
		}
		total += st.Size()
	}
	if total > max {
		t.Fatalf("the two files hold %d bytes, over %d", total, max)
	}
	recs, ws := readAll(t, dir, Filter{})
	if len(ws) != 0 || len(recs) == 0 {
		t.Fatalf("%d records, warnings %v", len(recs), ws)
	}
	// the newest are kept, in order
	if last := recs[len(recs)-1]; last.Path != "/uva/data/0999" {
		t.Fatalf("last record kept is %s, want the last written", last.Path)
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].Path <= recs[i-1].Path {
			t.Fatalf("records out of order: %s after %s", recs[i].Path, recs[i-1].Path)
		}
	}
	// Closed, the log holds none of its files open (each rotation closed
	// the one before).
	l.Close()
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, dir) {
			t.Errorf("file %s still open after Close", target)
		}
	}
}

func TestCorruptLineSkipped(t *testing.T) {
	l, dir := open(t, Options{})
	l.Write(Record{Who: "a@uva", Action: "resolve", Result: Granted})
	l.Flush()
	p := filepath.Join(dir, FileName)
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("{\"time\":\"2026-01-01T00:00:00Z\",\"action\":\"x\"\n")     // cut short
	f.WriteString("not json\n\n")                                              // garbage, then a blank line
	f.WriteString(`{"time":"2026-01-01T00:00:00Z","result":"granted"}` + "\n") // no action
	f.WriteString(strings.Repeat("x", MaxLine+10) + "\n")                      // too long
	f.WriteString(`{"time":"2026-01-01T00:00:00Z","action":"acl-set","result":"granted","who":"root@uva","extra":1}` + "\n")
	f.Close()
	l.Write(Record{Who: "b@uva", Action: "resolve", Result: Refused})
	l.Flush()
	recs, ws := readAll(t, dir, Filter{})
	if len(recs) != 3 {
		t.Fatalf("%d records, want the 3 whole ones: %+v", len(recs), recs)
	}
	if len(ws) != 4 {
		t.Fatalf("%d warnings, want 4: %v", len(ws), ws)
	}
	if ws[0].Line != 2 || !errors.Is(ws[0].Err, ErrNotRecord) || !errors.Is(ws[3].Err, ErrLineTooLong) || ws[3].Line != 6 {
		t.Fatalf("warnings %v", ws)
	}
	if !strings.Contains(ws[0].Error(), FileName+":2: skipped") {
		t.Fatalf("warning reads %q", ws[0].Error())
	}
}

func TestLongFieldsCut(t *testing.T) {
	l, dir := open(t, Options{})
	l.Write(Record{Action: "open", Result: Refused, Path: strings.Repeat("p", 100000)})
	l.Flush()
	recs, ws := readAll(t, dir, Filter{})
	if len(recs) != 1 || len(ws) != 0 || len(recs[0].Path) > MaxDetail+4 {
		t.Fatalf("%d records, %v", len(recs), ws)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"time":"2026-12-02T04:00:00Z","who":"alice@uva","action":"resolve","path":"/uva/data","rights":"rl","result":"granted","from":"10.0.0.1:4000","domain":"uva","server":"controller@uva"}`))
	f.Add([]byte(`{"time":"2026-12-02T04:00:00Z","action":"x","result":"refused","detail":"\u00e9\n"}{}`))
	f.Add([]byte(`{"time":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		if r.Time.IsZero() || r.Action == "" || r.Result == "" {
			t.Fatalf("decoded a record without time, action or result: %+v", r)
		}
		if y := r.Time.UTC().Year(); y < 0 || y > 9999 {
			return // JSON has no such time; servers write the present
		}
		// what the writer makes of a record, the reader reads back
		again, err := Decode(appendLine(nil, r))
		if err != nil {
			t.Fatalf("re-encoded record not read back: %v", err)
		}
		if !again.Time.Equal(r.Time) || again.Action != cut(r.Action) || again.Who != cut(r.Who) {
			t.Fatalf("round trip changed %+v into %+v", r, again)
		}
	})
}

// BenchmarkWrite is the cost a request pays to be recorded: Write alone,
// from many goroutines (the writer appends behind).
func BenchmarkWrite(b *testing.B) {
	l, err := Open(filepath.Join(b.TempDir(), FileName), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	r := Record{Who: "alice@uva", Action: "resolve", Path: "/uva/data/some/file", Rights: "rl", Result: Granted, From: "10.0.0.1:40000"}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Write(r)
		}
	})
	b.StopTimer()
	l.Flush()
}
