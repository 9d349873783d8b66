package e2e

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestTimesWhileWriting: times set on a file through a descriptor that
// holds written data not yet sent (as cp -p, tar, rsync and Samba do
// before close) leave the file its size, before and after close, and
// are the file's times at the share after close: the data goes first.
// Under write-back the size holds; the times are not kept yet (data kept
// back is sent later, with the time of that send; docs/posix.md).
func TestTimesWhileWriting(t *testing.T) {
	d := newDomain(t, "uva")
	root := d.addShare("alpha")
	for _, mode := range [][]string{nil, {"--consistency", "callback", "--write", "back"}} {
		a := mountAgent(t, d.admin, mode...)
		for _, size := range []int{1000, 5 << 20} {
			name := "timed-" + filepath.Base(a.dir) + "-" + time.Now().Format("150405.000000")
			p := filepath.Join(a.dir, "uva/alpha", name)
			data := make([]byte, size)
			rand.Read(data)
			f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(data, 0); err != nil {
				t.Fatal(err)
			}
			set := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
			ts := []unix.Timespec{unix.NsecToTimespec(set.UnixNano()), unix.NsecToTimespec(set.UnixNano())}
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), ts, 0); err != nil {
				t.Fatal(err)
			}
			if fi, err := f.Stat(); err != nil || fi.Size() != int64(size) {
				t.Errorf("%v %d bytes: fstat after setting times: %v %v", mode, size, fi.Size(), err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(p)
			if err != nil || fi.Size() != int64(size) || mode == nil && !fi.ModTime().Equal(set) {
				t.Errorf("%v %d bytes: after close: size %d, mtime %v, %v", mode, size, fi.Size(), fi.ModTime(), err)
			}
			if mode != nil {
				// Write-back: the share has it once the agent sends it.
				continue
			}
			sfi, err := os.Stat(filepath.Join(root, name))
			if err != nil || sfi.Size() != int64(size) || !sfi.ModTime().Equal(set) {
				t.Errorf("%d bytes: at the share: size %d, mtime %v, %v", size, sfi.Size(), sfi.ModTime(), err)
			}
			if got, _ := os.ReadFile(filepath.Join(root, name)); !bytes.Equal(got, data) {
				t.Errorf("%d bytes: the share holds other bytes", size)
			}
		}
	}
}
