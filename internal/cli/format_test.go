package cli

import (
	"bytes"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/wire"
)

// TestLongListing: ls -l's columns as coreutils lays them out: no leading
// space, one space between columns, numbers right-aligned, names left.
func TestLongListing(t *testing.T) {
	mt := time.Now().Add(-time.Hour).UnixNano()
	d := Time(mt)
	entries := []wire.DirEntry{
		{Name: "a.txt", Attr: wire.Attr{Mode: syscall.S_IFREG | 0o644, Nlink: 1, Size: 5, Mtime: mt}},
		{Name: "big", Attr: wire.Attr{Mode: syscall.S_IFREG | 0o600, Nlink: 12, Size: 3 << 30, Mtime: mt}},
		{Name: "dir", Attr: wire.Attr{Mode: syscall.S_IFDIR | 0o755, Nlink: 2, Size: 4096, Mtime: mt}},
	}
	var b bytes.Buffer
	if err := Listing(&b, entries, true, false, nil); err != nil {
		t.Fatal(err)
	}
	want := "-rw-r--r--  1 - -          5 " + d + " a.txt\n" +
		"-rw------- 12 - - 3221225472 " + d + " big\n" +
		"drwxr-xr-x  2 - -       4096 " + d + " dir\n"
	if b.String() != want {
		t.Errorf("ls -l:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	Listing(&b, entries, true, true, nil)
	if got := b.String(); !bytes.Contains([]byte(got), []byte(" 3.0G "+d)) || !bytes.Contains([]byte(got), []byte(" 4.0K "+d)) || !bytes.Contains([]byte(got), []byte("    5 "+d)) {
		t.Errorf("ls -lh:\n%s", got)
	}
	for n, want := range map[int64]string{0: "0", 1023: "1023", 1024: "1.0K", 1536: "1.5K", 10 << 20: "10M", 1<<20 + 1: "1.1M"} {
		if got := HumanSize(n); got != want {
			t.Errorf("HumanSize(%d) = %s, want %s", n, got, want)
		}
	}
}
