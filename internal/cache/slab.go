package cache

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Block buffers live in slabs of 2 MiB mapped apart from the Go heap and
// advised to be backed by transparent huge pages. A block's bytes are
// handed to the kernel twice, for the FUSE reply and for the direct write
// to the data file, and each time the kernel pins and maps the buffer's
// pages one by one: 256 small pages per MiB, against one huge page for two
// blocks. Measured on a cold read through the mount, the pinning and the
// FUSE copy cost 60% less from huge pages.
//
// Slabs are never unmapped, so that a buffer is never taken away from
// under a holder: the memory of a slab whose buffers all sat unused goes
// back to the system (MADV_DONTNEED), and the slab is reused as fresh
// pages. The address space kept is what the pool held at its peak.
const slabSize = 2 << 20

// slab is one mapping that block buffers are cut from.
type slab struct {
	mem  []byte
	idle int // buffers of it that are idle (see freeList)
}

// slabbed reports whether buffers of size bytes are cut from slabs: sizes
// that tile a slab, or whole multiples of it, from 64 KiB up.
func slabbed(size int) bool {
	return size >= 64<<10 && (slabSize%size == 0 || size%slabSize == 0)
}

// slabsMapped counts the bytes of slabs mapped (for tests).
var slabsMapped atomic.Int64

// mapSlab maps a slab for buffers of size bytes, aligned to slabSize so
// that the kernel can back it with huge pages, and returns its buffers; it
// returns nil if the system refuses the mapping (the caller then uses the
// Go heap).
func mapSlab(size int) (*slab, [][]byte) {
	n := max(size, slabSize)
	raw, err := unix.Mmap(-1, 0, n+slabSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(raw)))
	skip := int((slabSize - addr%slabSize) % slabSize)
	// Give back the unaligned head and tail of the mapping.
	if skip > 0 {
		_ = unix.Munmap(raw[:skip])
	}
	if tail := raw[skip+n:]; len(tail) > 0 {
		_ = unix.Munmap(tail)
	}
	mem := raw[skip : skip+n : skip+n]
	_ = unix.Madvise(mem, unix.MADV_HUGEPAGE) // a hint: without huge pages the slab still works
	slabsMapped.Add(int64(n))
	s := &slab{mem: mem}
	bufs := make([][]byte, 0, n/size)
	for off := 0; off+size <= n; off += size {
		bufs = append(bufs, mem[off:off+size:off+size])
	}
	return s, bufs
}

// release hands the slab's memory back to the system; its next use finds
// fresh pages.
func (s *slab) release() { releaseRange(s.mem) }

// releaseRange hands the pages under b back to the system; b stays
// mapped, and reads as zeros until written.
func releaseRange(b []byte) { _ = unix.Madvise(b, unix.MADV_DONTNEED) }

// bufAddr is the address a buffer starts at, the key of its slab.
func bufAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b[:1]))) }
