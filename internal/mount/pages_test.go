package mount_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/mount"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/vfs"
)

// dirent is one entry getdents gave: its name and the offset after it.
type dirent struct {
	name string
	off  int64
}

// getdents reads fd's directory entries from where it stands to the end,
// in small reads (many FUSE readdirs), leaving out . and ..
func getdents(t *testing.T, fd int) []dirent {
	t.Helper()
	var out []dirent
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return out
		}
		for b := buf[:n]; len(b) > 0; {
			off := int64(binary.LittleEndian.Uint64(b[8:]))
			reclen := binary.LittleEndian.Uint16(b[16:])
			name := b[19:reclen]
			for i, c := range name {
				if c == 0 {
					name = name[:i]
					break
				}
			}
			if s := string(name); s != "." && s != ".." {
				out = append(out, dirent{s, off})
			}
			b = b[reclen:]
		}
	}
}

// A directory larger than the agent's bound on metadata allows lists
// through the mount a page at a time: every name once, in order; a seek
// to an offset getdents gave goes on from the entry after it, a seek to 0
// lists all again. Its entries go to readdirplus without inodes until a
// program looks one up.
func TestPagedDirectoryThroughTheMount(t *testing.T) {
	const n = 5000
	d := testenv.New(t, "bench")
	root := d.AddShare("data")
	dir := filepath.Join(root, "big")
	os.Mkdir(dir, 0o755)
	for i := range n {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("entry-%05d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	a := startAgent(t, d, vfs.Options{MetaEntries: 400}, cache.Options{})
	p := filepath.Join(a.Mount().Dir(), "bench", "data", "big")
	if !a.FS().Paged(t.Context(), "/bench/data/big") {
		t.Fatal("not listed by pages")
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	check := func(what string, got []dirent, from int) {
		t.Helper()
		if len(got) != n-from {
			t.Fatalf("%s: %d entries; want %d", what, len(got), n-from)
		}
		for i, e := range got {
			if want := fmt.Sprintf("entry-%05d", from+i); e.name != want {
				t.Fatalf("%s: entry %d is %q; want %q", what, from+i, e.name, want)
			}
		}
	}
	all := getdents(t, fd)
	check("listing", all, 0)
	// readdirplus was given the entries without inodes: the agent holds
	// one only for an entry looked up.
	if got := mount.Children(a.Mount(), "/bench/data/big"); got != 0 {
		t.Errorf("the mount holds %d inodes of the directory after a listing", got)
	}
	if _, err := os.Lstat(filepath.Join(p, "entry-00042")); err != nil {
		t.Fatal(err)
	}
	if got := mount.Children(a.Mount(), "/bench/data/big"); got != 1 {
		t.Errorf("the mount holds %d inodes of the directory after a stat of one entry; want 1", got)
	}
	for _, k := range []int{n / 2, 10, n - 1} {
		if _, err := unix.Seek(fd, all[k].off, 0); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("after a seek to entry %d", k), getdents(t, fd), k+1)
	}
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		t.Fatal(err)
	}
	check("after a seek to 0", getdents(t, fd), 0)
	// A child was looked up (the stat above): a program that stats what
	// it lists; the entries it reads from then on come with inodes.
	if got := mount.Children(a.Mount(), "/bench/data/big"); got != n {
		t.Errorf("the mount holds %d inodes of the directory after a stat and a listing; want %d", got, n)
	}
	before := a.Client().Counts()["readdir"]
	ents, err := os.ReadDir(p)
	if err != nil || len(ents) != n {
		t.Fatalf("listed again: %d entries, %v", len(ents), err)
	}
	if got := a.Client().Counts()["readdir"] - before; got < 2 {
		t.Errorf("listed again with %d readdir requests: a listing of %d entries was kept under a bound of 400", got, n)
	}
}
