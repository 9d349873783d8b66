package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fileModel is what one file must hold: its bytes, and so its size.
type fileModel struct{ data []byte }

func (m *fileModel) resize(n int64) {
	if int(n) <= len(m.data) {
		m.data = m.data[:n]
		return
	}
	m.data = append(m.data, make([]byte, int(n)-len(m.data))...)
}

func (m *fileModel) writeAt(b []byte, off int64) {
	if end := off + int64(len(b)); end > int64(len(m.data)) {
		m.resize(end)
	}
	copy(m.data[off:], b)
}

// modelRun drives one file through random operations, each checked
// against the model: reads, writes, reads and writes through a shared
// mapping, truncates up and down, fallocate, close and reopen. After
// every close a second agent (reader, the same file through another
// mount) must read what the model holds.
type modelRun struct {
	seed     uint64
	rng      *rand.Rand
	path     string // the file, through the writer's mount
	other    string // the same file, through the reader's mount
	atShare  string // the same file in the share's directory
	model    fileModel
	f        *os.File
	buf, got []byte
	last     []string // the newest operations, for a failure's report
	noFalloc bool
	kind     string // the kind of the operation just run, "" if none ran
}

const (
	modelMaxSize = 1 << 20  // 16 blocks of 64 KiB, and partial ones
	modelMaxIO   = 96 << 10 // one and a half blocks: most I/O crosses a boundary
)

func (r *modelRun) note(i int, format string, args ...any) {
	s := fmt.Sprintf("op %d: ", i) + fmt.Sprintf(format, args...)
	if len(r.last) == 12 {
		r.last = r.last[1:]
	}
	r.last = append(r.last, s)
}

func (r *modelRun) fail(format string, args ...any) error {
	return fmt.Errorf("%s (seed %d, replay with PANDO_SEED=%d); the last operations:\n  %s",
		fmt.Sprintf(format, args...), r.seed, r.seed, strings.Join(r.last, "\n  "))
}

func (r *modelRun) open() error {
	f, err := os.OpenFile(r.path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return r.fail("open: %v", err)
	}
	r.f = f
	return nil
}

// randBytes fills n bytes of r.buf.
func (r *modelRun) randBytes(n int) []byte {
	b := r.buf[:n]
	for j := 0; j < n; j += 8 {
		v := r.rng.Uint64()
		for k := 0; k < 8 && j+k < n; k++ {
			b[j+k] = byte(v >> (8 * k))
		}
	}
	return b
}

// compare checks got, read at off, against the model.
func (r *modelRun) compare(what string, got []byte, off int64) error {
	want := []byte{}
	if off < int64(len(r.model.data)) {
		want = r.model.data[off:min(int(off)+len(got), len(r.model.data))]
	}
	if bytes.Equal(got, want) {
		return nil
	}
	first := 0
	for first < min(len(got), len(want)) && got[first] == want[first] {
		first++
	}
	last, zeros := first, 0 // the extent of the difference, and how much of it reads as zeros
	for j := first; j < min(len(got), len(want)); j++ {
		if got[j] != want[j] {
			last = j
			if got[j] == 0 {
				zeros++
			}
		}
	}
	return r.fail("%s at %d: %d bytes, the model has %d; they differ from file offset %d to %d (%d bytes differ, %d of them read as 0)",
		what, off, len(got), len(want), off+int64(first), off+int64(last), diffCount(got, want), zeros)
}

func diffCount(a, b []byte) int {
	n := 0
	for j := range min(len(a), len(b)) {
		if a[j] != b[j] {
			n++
		}
	}
	return n
}

// checkSize compares the size seen by fstat and by a stat of the path
// with the model's.
func (r *modelRun) checkSize() error {
	fi, err := r.f.Stat()
	if err != nil {
		return r.fail("fstat: %v", err)
	}
	if fi.Size() != int64(len(r.model.data)) {
		return r.fail("fstat gives size %d (%#x), the model %d (%#x)", fi.Size(), fi.Size(), len(r.model.data), len(r.model.data))
	}
	fi, err = os.Stat(r.path)
	if err != nil {
		return r.fail("stat: %v", err)
	}
	if fi.Size() != int64(len(r.model.data)) {
		return r.fail("stat gives size %d (%#x), the model %d (%#x)", fi.Size(), fi.Size(), len(r.model.data), len(r.model.data))
	}
	return nil
}

// checkRange reads [off, off+n) back with pread (a path other than the
// mapping's) and compares it with the model.
func (r *modelRun) checkRange(what string, off int64, n int) error {
	k, err := r.f.ReadAt(r.got[:n], off)
	if err != nil && !errors.Is(err, io.EOF) {
		return r.fail("%s: read back: %v", what, err)
	}
	return r.compare(what+", read back", r.got[:k], off)
}

// checkAll reads the whole file at path and compares it with the model.
func (r *modelRun) checkAll(what, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return r.fail("%s: %v", what, err)
	}
	if len(b) != len(r.model.data) {
		return r.fail("%s: %d bytes (%#x), the model has %d (%#x)", what, len(b), len(b), len(r.model.data), len(r.model.data))
	}
	return r.compare(what, b, 0)
}

func (r *modelRun) step(i int) error {
	r.kind = ""
	size := int64(len(r.model.data))
	op := r.rng.IntN(100)
	switch {
	case op < 20: // pwrite, often across block boundaries and past the end
		off := r.rng.Int64N(modelMaxSize - modelMaxIO)
		b := r.randBytes(1 + r.rng.IntN(modelMaxIO))
		r.note(i, "pwrite %d bytes at %d (size %d)", len(b), off, size)
		r.kind = "write"
		if _, err := r.f.WriteAt(b, off); err != nil {
			return r.fail("pwrite: %v", err)
		}
		r.model.writeAt(b, off)
		return r.checkRange("pwrite", off, len(b))
	case op < 38: // pread, sometimes past the end
		off := r.rng.Int64N(size + 1 + 64<<10)
		n := 1 + r.rng.IntN(modelMaxIO)
		r.note(i, "pread %d bytes at %d (size %d)", n, off, size)
		r.kind = "read"
		return r.checkRange("pread", off, n)
	case op < 52: // write through a shared mapping (within the size: a mapping cannot extend a file)
		if size == 0 {
			return nil
		}
		off := r.rng.Int64N(size)
		n := 1 + r.rng.IntN(int(min(size-off, modelMaxIO)))
		sync := r.rng.IntN(2) == 0
		r.note(i, "mmap write %d bytes at %d (size %d, msync %v)", n, off, size, sync)
		r.kind = "mmap write"
		base := off &^ (4096 - 1) // a window of the file: mappings start on a page
		m, err := syscall.Mmap(int(r.f.Fd()), base, int(off-base)+n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		if err != nil {
			return r.fail("mmap: %v", err)
		}
		b := r.randBytes(n)
		copy(m[off-base:], b)
		if sync {
			if err := unix.Msync(m, unix.MS_SYNC); err != nil {
				syscall.Munmap(m)
				return r.fail("msync: %v", err)
			}
		}
		if err := syscall.Munmap(m); err != nil {
			return r.fail("munmap: %v", err)
		}
		r.model.writeAt(b, off)
		return r.checkRange("mmap write", off, n)
	case op < 62: // read through a shared mapping, sometimes of the whole file
		if size == 0 {
			return nil
		}
		base, n := int64(0), size
		if r.rng.IntN(4) != 0 {
			base = r.rng.Int64N(size) &^ (4096 - 1)
			n = 1 + r.rng.Int64N(min(size-base, modelMaxIO))
		}
		r.note(i, "mmap read %d bytes at %d (size %d)", n, base, size)
		r.kind = "mmap read"
		m, err := syscall.Mmap(int(r.f.Fd()), base, int(n), syscall.PROT_READ, syscall.MAP_SHARED)
		if err != nil {
			return r.fail("mmap: %v", err)
		}
		err = r.compare("mmap read", m, base)
		syscall.Munmap(m)
		return err
	case op < 80: // truncate up or down, by descriptor or by path
		to := r.rng.Int64N(modelMaxSize)
		if r.rng.IntN(3) == 0 { // often just across the end, inside one block
			to = max(0, min(modelMaxSize-1, size+r.rng.Int64N(128<<10)-64<<10))
		}
		byPath := r.rng.IntN(4) == 0
		r.note(i, "truncate %d -> %d (by path %v)", size, to, byPath)
		r.kind = "truncate"
		var err error
		if byPath {
			err = os.Truncate(r.path, to)
		} else {
			err = r.f.Truncate(to)
		}
		if err != nil {
			return r.fail("truncate: %v", err)
		}
		r.model.resize(to)
		if to > 0 {
			lo := max(0, min(to, size)-4096)
			return r.checkRange("truncate", lo, int(min(to-lo+4096, modelMaxIO)))
		}
		return nil
	case op < 95: // fallocate, keeping the size or extending it
		if r.noFalloc {
			return nil
		}
		off := r.rng.Int64N(modelMaxSize - modelMaxIO)
		n := 1 + r.rng.Int64N(modelMaxIO)
		mode := uint32(0)
		if r.rng.IntN(3) == 0 {
			mode = unix.FALLOC_FL_KEEP_SIZE
		}
		r.note(i, "fallocate mode %d, %d bytes at %d (size %d)", mode, n, off, size)
		err := unix.Fallocate(int(r.f.Fd()), mode, off, n)
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
			r.noFalloc = true
			return nil
		}
		if err != nil {
			return r.fail("fallocate: %v", err)
		}
		r.kind = "fallocate"
		if mode == 0 && off+n > size {
			r.model.resize(off + n)
		}
		return r.checkRange("fallocate", max(0, off-4096), int(min(n+8192, modelMaxIO)))
	default: // close, the other agent reads, reopen and read all
		r.note(i, "close, read at the other agent, reopen (size %d)", size)
		r.kind = "close"
		if err := r.f.Close(); err != nil {
			return r.fail("close: %v", err)
		}
		if err := r.checkAll("the other agent's read after the close", r.other); err != nil {
			return fmt.Errorf("%w\nthen: the share's file: %v\nthe writer's read: %v", err,
				r.checkAll("the share's file", r.atShare), r.checkAll("the writer's read", r.path))
		}
		if err := r.open(); err != nil {
			return err
		}
		return r.checkAll("a read after the reopen", r.path)
	}
}

// TestFileModel: one file, driven through random operations per write
// mode (close, through, and callback with write-back), is checked against
// a model of its bytes and size after every one; a second agent reads it
// after every close. The suite runs 10,000 operations a mode (about half a
// minute each on a busy machine); PANDO_MODEL_OPS=100000 runs the count
// the issue asks for (passed: close 5m53s, through 4m06s, callback+back
// 6m14s, loaded machine). PANDO_MODEL_DEBUG=1 puts the writer's debug log
// in a failure's report.
func TestFileModel(t *testing.T) {
	ops := 10_000
	if s := os.Getenv("PANDO_MODEL_OPS"); s != "" {
		ops, _ = strconv.Atoi(s)
	}
	seed := uint64(time.Now().UnixNano() % 1_000_000_007)
	if s := os.Getenv("PANDO_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (set PANDO_SEED to replay)", seed)
	d := newDomain(t, "fm")
	root := d.addShare("data")
	modes := []struct {
		name   string
		writer []string
		reader []string
	}{
		{"close", []string{"--write", "close"}, []string{"--consistency", "strict"}},
		{"through", []string{"--write", "through"}, []string{"--consistency", "strict"}},
		{"callback+back", []string{"--consistency", "callback", "--write", "back"}, []string{"--consistency", "callback"}},
	}
	for mi, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			wargs := append(m.writer, "--block-size", "64KiB")
			if os.Getenv("PANDO_MODEL_DEBUG") != "" {
				wargs = append(wargs, "-v") // the writer's debug log is in the failure's report
			}
			w := mountAgent(t, d.admin, wargs...)
			rd := mountAgent(t, d.admin, append(m.reader, "--block-size", "64KiB")...)
			name := fmt.Sprintf("model%d", mi)
			r := &modelRun{
				seed:    seed + uint64(mi),
				path:    filepath.Join(w.dir, "fm", "data", name),
				other:   filepath.Join(rd.dir, "fm", "data", name),
				atShare: filepath.Join(root, name),
				buf:     make([]byte, modelMaxIO),
				got:     make([]byte, modelMaxIO),
			}
			r.rng = rand.New(rand.NewPCG(r.seed, r.seed*7+1))
			if err := r.open(); err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			counts, dur := map[string]int{}, map[string]time.Duration{}
			var err error
			for i := 0; i < ops && err == nil; i++ {
				t1 := time.Now()
				err = r.step(i)
				if r.kind != "" {
					counts[r.kind]++
					dur[r.kind] += time.Since(t1)
				}
				t1 = time.Now()
				if err == nil {
					err = r.checkSize()
				}
				dur["stat and fstat"] += time.Since(t1)
			}
			if err == nil {
				if err = r.f.Close(); err == nil {
					err = r.checkAll("the other agent's last read", r.other)
				}
			} else {
				r.f.Close()
			}
			if err != nil {
				t.Fatalf("%s: %v\nthe writer said:\n%s\nthe share said:\n%s", m.name, err, w.proc.output(), d.shares["data"].output())
			}
			t.Logf("%s: %d operations in %v (seed %d): %v; fallocate unsupported: %v",
				m.name, ops, time.Since(t0).Round(time.Millisecond), r.seed, counts, r.noFalloc)
			for k, d := range dur {
				dur[k] = d.Round(time.Millisecond)
			}
			t.Logf("%s: time by kind: %v", m.name, dur)
		})
	}
}
