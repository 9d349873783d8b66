package client_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/wire"
)

// TestReadBlockSum: a block read from a share comes with the CRC32C of the
// bytes read, under every data channel protection, also for the short
// block at the end of the file and for a read past it.
func TestReadBlockSum(t *testing.T) {
	d := testenv.New(t, "t")
	d.Protection = []string{"private", "safe", "clear"}
	root := d.AddShare("data")
	size := int64(5<<20 + 4321)
	testenv.MakeFile(t, filepath.Join(root, "f"), size)
	want, err := os.ReadFile(filepath.Join(root, "f"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, prot := range []string{"private", "safe", "clear"} {
		c, err := client.New(d.Admin, client.Options{Streams: 2, Protection: prot})
		if err != nil {
			t.Fatal(err)
		}
		f, err := c.Open(ctx, "/t/data/f", wire.OpenRead)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1<<20)
		for off := int64(0); off <= size; off += int64(len(buf)) {
			n, sum, err := f.ReadBlockSum(ctx, buf, off)
			if err != nil {
				t.Fatalf("%s: read at %d: %v", prot, off, err)
			}
			end := min(off+int64(len(buf)), size)
			if int64(n) != end-off || !bytes.Equal(buf[:n], want[off:end]) {
				t.Fatalf("%s: read at %d: %d bytes, want %d", prot, off, n, end-off)
			}
			if sum != wire.CRC(buf[:n]) {
				t.Errorf("%s: read at %d: sum %08x, the bytes' %08x", prot, off, sum, wire.CRC(buf[:n]))
			}
			m, err := f.ReadBlock(ctx, buf, off)
			if err != nil || m != n {
				t.Errorf("%s: ReadBlock at %d: %d bytes, %v; ReadBlockSum read %d", prot, off, m, err, n)
			}
		}
		if n, sum, err := f.ReadBlockSum(ctx, buf, size+10); n != 0 || sum != 0 || err != nil {
			t.Errorf("%s: read past the end: %d bytes, sum %08x, %v", prot, n, sum, err)
		}
		f.Close(ctx)
		c.Close()
	}
}

// TestWriteBlockSum: the share refuses a block whose data does not match
// the sum it came with and leaves the file as it was; WriteAt sends each
// request with its data's sum.
func TestWriteBlockSum(t *testing.T) {
	d := testenv.New(t, "t")
	root := d.AddShare("data")
	c := d.Client(d.Admin)
	ctx := context.Background()
	f, err := c.Create(ctx, "/t/data/f", wire.OpenRead|wire.OpenWrite, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	want := bytes.Repeat([]byte("0123456789abcdef"), 40000)
	f.Chunk = 64 << 10 // many requests
	if n, err := f.WriteAt(ctx, want, 0); err != nil || n != len(want) {
		t.Fatalf("WriteAt: %d bytes, %v", n, err)
	}
	got, _ := os.ReadFile(filepath.Join(root, "f"))
	if !bytes.Equal(got, want) {
		t.Fatalf("WriteAt wrote %d bytes that differ from the %d given", len(got), len(want))
	}
	block := bytes.Repeat([]byte{0xee}, 100000)
	err = f.WriteBlock(ctx, block, 1000, wire.CRC(block)^1)
	if wire.CodeOf(err) != wire.CodeCorrupt {
		t.Fatalf("a block whose sum does not match: %v, want code %d", err, wire.CodeCorrupt)
	}
	got, _ = os.ReadFile(filepath.Join(root, "f"))
	if !bytes.Equal(got, want) {
		t.Error("the refused block changed the file")
	}
	if err := f.WriteBlock(ctx, block, 1000, wire.CRC(block)); err != nil {
		t.Fatal(err)
	}
	copy(want[1000:], block)
	got, _ = os.ReadFile(filepath.Join(root, "f"))
	if !bytes.Equal(got, want) {
		t.Error("a block with the right sum was not written")
	}
}
