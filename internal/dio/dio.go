// Package dio writes whole, aligned blocks to files around the page cache
// (O_DIRECT), as the agent's block cache does. New page-cache
// pages cost a writer more than the disk does (on a virtual machine that
// hands free memory back to its host, several times more), and a writer
// that already holds the bytes in memory gains nothing from a second copy
// of them in the kernel.
package dio

import (
	"errors"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Align is the alignment O_DIRECT needs of offsets, lengths and buffers on
// the file systems pando writes to.
const Align = 4096

// Aligned reports whether p at off can be written with O_DIRECT.
func Aligned(p []byte, off int64) bool {
	return len(p) > 0 && len(p)%Align == 0 && off%Align == 0 &&
		uintptr(unsafe.Pointer(unsafe.SliceData(p)))%Align == 0
}

// ErrUnsupported is returned by Open for a file system that has no
// O_DIRECT (or, like tmpfs, gains nothing from it).
var ErrUnsupported = errors.New("the file system does not support direct I/O")

// Open opens a second, write-only descriptor of f's inode with O_DIRECT.
func Open(f *os.File) (*os.File, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC {
		return nil, ErrUnsupported // memory already: a direct write is a copy too
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), unix.O_WRONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EINVAL) {
		return nil, ErrUnsupported
	}
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// WriteAt writes p at off through d, a descriptor from Open; p and off
// must be Aligned.
func WriteAt(d *os.File, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := unix.Pwrite(int(d.Fd()), p, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "write", Path: d.Name(), Err: err}
		}
		if n == 0 {
			return &os.PathError{Op: "write", Path: d.Name(), Err: unix.EIO}
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}
