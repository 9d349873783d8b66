package mount_test

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/mount"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/vfs"
)

// TestReReadAfterColdRead: a large file read cold through the agent (an
// open for direct I/O) and read again at once is read the second time by
// the kernel from the cache's data file (passthrough): no READ reaches the
// agent, and the bytes are the share's, also when the agent hears of the
// first open's close only after the second open came (the kernel sends
// RELEASE after close(2) has returned). A direct open whose descriptor was
// duplicated, and one copy closed, is still out: the next open waits for
// it in vain, and is served by the agent (not refused); once it is
// released, opens are passthrough again.
func TestReReadAfterColdRead(t *testing.T) {
	d := testenv.New(t, "t")
	root := d.AddShare("data")
	data := make([]byte, 96<<20+12345) // more than openWork, and a direct open
	rand.Read(data)
	for _, name := range []string{"big", "big2"} {
		if err := os.WriteFile(filepath.Join(root, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := startAgent(t, d, vfs.Options{}, cache.Options{DiskBytes: gib})
	m := a.Mount()
	p := filepath.Join(m.Dir(), "t", "data", "big")
	read := func(what string) (served mount.Opens) {
		t.Helper()
		before := m.Opens()
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: read %d bytes, not the share's %d (%v)", what, len(got), len(data), err)
		}
		return m.Opens().Sub(before)
	}

	let := mount.HoldReleases(t)
	if s := read("the cold read"); s.Direct != 1 || s.ReadBytes != int64(len(data)) {
		t.Fatalf("the cold read was served as %+v; want one open for direct I/O (Linux 6.6) whose bytes the agent sent", s)
	}
	waitOnDisk(t, a, int64(len(data)))
	// The agent hears of the cold open's close after the next open came.
	go func() {
		time.Sleep(200 * time.Millisecond)
		let()
	}()
	if s := read("the first re-read"); s.Passthrough != 1 || s.Reads != 0 {
		t.Errorf("the re-read right after the cold read was served as %+v; want one passthrough open and no READ to the agent", s)
	}
	if s := read("the second re-read"); s.Passthrough != 1 || s.Reads != 0 {
		t.Errorf("the second re-read was served as %+v; want one passthrough open and no READ to the agent", s)
	}

	// A direct open of another large file, not yet in the cache, with a
	// duplicated descriptor, one copy closed.
	p = filepath.Join(m.Dir(), "t", "data", "big2")
	before := m.Opens()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if o := m.Opens(); o.Direct != before.Direct+1 {
		f.Close()
		t.Fatalf("a cold open was served as %+v; want an open for direct I/O", o)
	}
	dup, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if s := read("a read while a copy of a direct open's descriptor is open"); s.Passthrough != 0 || s.Reads == 0 {
		t.Errorf("a read while a direct open is out was served as %+v; want it served by the agent", s)
	}
	syscall.Close(dup)
	waitOnDisk(t, a, 2*int64(len(data)))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if s := read("a read after the direct open's last descriptor closed"); s.Passthrough == 1 && s.Reads == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("reads of the file still reach the agent 20 s after its direct open was closed")
		}
	}
}
