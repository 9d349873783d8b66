package cache

import (
	"bytes"
	"context"
	"io"
	"testing"
)

// TestWritesDuringSendStayDirty: a write-back takes the dirty ranges at a
// mark and marks them clean once the share has them; what the file's
// programs wrote meanwhile (the same blocks again, a new block, a new
// size) is not in what was sent, and must stay dirty, with the size this
// cache gave it, or it would never reach the share.
func TestWritesDuringSendStayDirty(t *testing.T) {
	bs := int64(4096)
	c, err := Open(Options{Dir: t.TempDir(), BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := &remote{Data: bytes.Repeat([]byte("s"), int(4*bs))}
	c.Validate("f", 7, int64(len(r.Data)), "/d/f")
	write := func(b string, off int64) {
		t.Helper()
		if err := c.WriteAt(ctx, "f", []byte(b), off, r.Fetch); err != nil {
			t.Fatal(err)
		}
	}
	write("first", 10)
	write("first", 2*bs+10)
	sent, mark := c.DirtyAt("f")
	if len(sent) != 2 {
		t.Fatalf("dirty before the send: %v", sent)
	}
	// While they are on the way: block 0 written again, block 3 for the
	// first time, and the file grown.
	write("again", 20)
	write("new", 3*bs+1)
	if err := c.Truncate("f", 5*bs); err != nil {
		t.Fatal(err)
	}
	c.MarkClean("f", sent, mark, 8, 4*bs)
	got := c.Dirty("f")
	want := []Range{{Off: 10, Len: 5}, {Off: 20, Len: 5}, {Off: 3*bs + 1, Len: 3}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("dirty after the send: %v, want %v (block 2 sent, blocks 0 and 3 written since)", got, want)
	}
	if v, size, _ := c.Version("f"); v != 8 || size != 5*bs {
		t.Fatalf("after the send: version %d size %d, want 8 and the size set here, %d", v, size, 5*bs)
	}
	buf := make([]byte, 5)
	if _, err := c.ReadAt(ctx, "f", buf, 20, r.Fetch); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if string(buf) != "again" {
		t.Fatalf("read %q", buf)
	}

	// The next send takes them, and nothing is written meanwhile.
	sent, mark = c.DirtyAt("f")
	c.MarkClean("f", sent, mark, 9, 5*bs)
	if d := c.Dirty("f"); len(d) != 0 || c.Unsent("f") {
		t.Fatalf("dirty after a send with no write meanwhile: %v", d)
	}
	if v, size, _ := c.Version("f"); v != 9 || size != 5*bs {
		t.Fatalf("version %d size %d", v, size)
	}
}
