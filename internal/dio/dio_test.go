package dio

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteAt(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := Open(f)
	if errors.Is(err, ErrUnsupported) {
		t.Skip("the test directory's file system has no O_DIRECT")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p := make([]byte, 1<<20)
	for i := range p {
		p[i] = byte(i * 7)
	}
	if !Aligned(p, Align) || Aligned(p[1:], Align) || Aligned(p, 1) || Aligned(p[:100], 0) {
		t.Fatal("Aligned is wrong")
	}
	if err := WriteAt(d, p, Align); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(p))
	if _, err := f.ReadAt(got, Align); err != nil || !bytes.Equal(got, p) {
		t.Fatalf("read back %v, equal %v", err, bytes.Equal(got, p))
	}
	if err := WriteAt(d, p[1:Align+1], 0); err == nil {
		t.Error("an unaligned direct write succeeded")
	}
}
