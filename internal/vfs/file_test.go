package vfs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/consistency"
	"pando.dev/pando/internal/testenv"
)

// A file read to its end through the vfs is read straight from the
// cache's data file from its next use on (Reused), and by the next open
// once closed; Read, Seek and ReadAt give the same bytes either way.
func TestFileDirectReads(t *testing.T) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	data := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB: three blocks
	for _, name := range []string{"reused", "closed"} {
		if err := os.WriteFile(filepath.Join(root, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v, _, _ := runAgent(t, d, t.TempDir(), consistency.Consistency{Mode: consistency.ModeWindow, Period: time.Minute})
	ctx := context.Background()
	open := func(name string) *File {
		t.Helper()
		f, err := v.OpenFile(ctx, "/uva/alpha/"+name, syscall.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	readAll := func(f *File) {
		t.Helper()
		got := make([]byte, len(data)+10)
		n, err := f.ReadAt(ctx, got, 0)
		if n != len(data) || !errors.Is(err, io.EOF) || !bytes.Equal(got[:n], data) {
			t.Fatalf("ReadAt of the whole file: %d bytes, %v; want %d bytes and io.EOF", n, err, len(data))
		}
	}
	tail := func(f *File) {
		t.Helper()
		if _, err := f.Seek(-10, io.SeekEnd); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(readerOf(ctx, f))
		if err != nil || !bytes.Equal(got, data[len(data)-10:]) {
			t.Fatalf("Read after Seek to 10 before the end: %q, %v; want %q", got, err, data[len(data)-10:])
		}
	}

	f := open("reused")
	if f.ReadDirect() || f.DataFile() != nil {
		t.Fatal("a file the cache does not hold is read directly")
	}
	f.Reused()
	if f.DataFile() != nil {
		t.Fatal("a file not read to its end is read directly after Reused")
	}
	readAll(f)
	f.Reused()
	if f.DataFile() == nil {
		t.Fatal("a file read to its end is not read directly after Reused")
	}
	readAll(f)
	tail(f)
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}

	f = open("closed")
	if f.ReadDirect() {
		t.Fatal("a file the cache does not hold is read directly")
	}
	tail(f) // through the read window
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(readerOf(ctx, f)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Read of the whole file through the vfs: %d bytes, %v", len(got), err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f = open("closed")
	defer f.Close(ctx)
	if !f.ReadDirect() {
		t.Fatal("a file read to its end before its close is not read directly by the next open")
	}
	tail(f)
}

// A File's cursor as an io.Reader.
type cursor struct {
	ctx context.Context
	f   *File
}

func readerOf(ctx context.Context, f *File) io.Reader { return cursor{ctx, f} }

func (c cursor) Read(p []byte) (int, error) { return c.f.Read(c.ctx, p) }
