package mount_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"pando.dev/pando/internal/agent"
	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/wire"
)

// faultyData is a decorator of the agent's data path: it counts the reads
// that reach it and, with failFrom set, fails every read from that one on
// (counting from 1). Nothing of the vfs knows of it.
type faultyData struct {
	remote.Data
	reads    atomic.Int64
	failFrom int64
}

// errInjected is the failure faultyData injects.
var errInjected = wire.Errorf(wire.CodeIO, "a read failed on purpose")

func (d *faultyData) read() error {
	if n := d.reads.Add(1); d.failFrom > 0 && n >= d.failFrom {
		return errInjected
	}
	return nil
}

func (d *faultyData) wrap(f remote.File, err error) (remote.File, error) {
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: f, d: d}, nil
}

func (d *faultyData) Open(ctx context.Context, p string, flags uint32) (remote.File, error) {
	return d.wrap(d.Data.Open(ctx, p, flags))
}

func (d *faultyData) OpenFirst(ctx context.Context, p string, flags uint32, n int) (remote.File, error) {
	return d.wrap(d.Data.OpenFirst(ctx, p, flags, n))
}

func (d *faultyData) Create(ctx context.Context, p string, flags, mode uint32) (remote.File, error) {
	return d.wrap(d.Data.Create(ctx, p, flags, mode))
}

type faultyFile struct {
	remote.File
	d *faultyData
}

func (f *faultyFile) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if err := f.d.read(); err != nil {
		return 0, err
	}
	return f.File.ReadAt(ctx, p, off)
}

func (f *faultyFile) ReadAtSum(ctx context.Context, p []byte, off int64) (int, uint32, bool, error) {
	if err := f.d.read(); err != nil {
		return 0, 0, false, err
	}
	return f.File.ReadAtSum(ctx, p, off)
}

// startFaulty mounts d with its data path wrapped in fd, and returns the
// path of the share alpha in the mount, which holds a file big of 8
// blocks.
func startFaulty(t *testing.T, fd *faultyData) (big string, want []byte) {
	d := testenv.New(t, "uva")
	root := d.AddShare("alpha")
	want = bytes.Repeat([]byte("a block's worth of bytes, "), 8<<20/26)
	if err := os.WriteFile(filepath.Join(root, "big"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	a := startAgentWith(t, d, agent.Config{WrapData: func(data remote.Data) remote.Data {
		fd.Data = data
		return fd
	}})
	return filepath.Join(a.Mount().Dir(), "uva", "alpha", "big"), want
}

// A decorator of the data path, given to the agent, sees the mount's
// reads: a cold read through FUSE reaches the share through it.
func TestDataPathDecoratorCountsReads(t *testing.T) {
	fd := &faultyData{}
	big, want := startFaulty(t, fd)
	got, err := os.ReadFile(big)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes through the mount (%v); want the share's %d", len(got), err, len(want))
	}
	if fd.reads.Load() == 0 {
		t.Fatal("the decorator saw no read: the mount's data path does not go through it")
	}
}

// A decorator that fails the second read makes a cold read through FUSE
// fail with EIO: its error reaches the reader.
func TestDataPathDecoratorFailsReads(t *testing.T) {
	fd := &faultyData{failFrom: 2}
	big, _ := startFaulty(t, fd)
	_, err := os.ReadFile(big)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("reading a file whose second share read fails: %v; want EIO", err)
	}
	if n := fd.reads.Load(); n < 2 {
		t.Errorf("the decorator saw %d reads; want the failing second at least", n)
	}
}
