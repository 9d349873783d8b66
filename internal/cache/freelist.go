package cache

import (
	"runtime/debug"
	"sync"
	"time"
)

// freeList keeps buffers of one size for reuse. Unlike a sync.Pool, which
// empties at every other garbage collection, it keeps them while they are
// in use: a cold read cycles through hundreds of blocks waiting for the
// disk, and each buffer lost to a collection is a fresh one the kernel
// must clear and map. The most recently freed buffer is handed out first
// (it is likeliest still in the CPU's caches). It holds at most max
// buffers, and gives back to the system, every trimEvery, those it did not
// need in the period before: an idle agent holds none for long.
//
// Buffers of the sizes blocks have are cut from slabs (see slab.go);
// others come from the Go heap.
type freeList struct {
	size  int
	max   int
	slabs bool // buffers are cut from slabs

	mu    sync.Mutex
	bufs  [][]byte
	low   int // fewest buffers held since the last trim
	timer *time.Timer

	// With slabs: the buffers neither in use nor in bufs (trimmed, or
	// not yet used), and each slab buffer's slab by its address.
	idle  [][]byte
	owner map[uintptr]*slab
}

const (
	trimEvery  = 5 * time.Second
	releaseMin = 64 << 20 // bytes of the Go heap dropped at once that are handed back to the system
)

func newFreeList(size, max int) *freeList {
	l := &freeList{size: size, max: max, slabs: slabbed(size)}
	if l.slabs {
		l.owner = make(map[uintptr]*slab)
	}
	return l
}

// get returns a buffer of l.size bytes, reused if there is one (its bytes
// are whatever they were).
func (l *freeList) get() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.bufs); n > 0 {
		b := l.bufs[n-1]
		l.bufs[n-1] = nil
		l.bufs = l.bufs[:n-1]
		l.low = min(l.low, len(l.bufs))
		return b
	}
	if l.slabs {
		if len(l.idle) == 0 {
			if s, bufs := mapSlab(l.size); s != nil {
				for _, b := range bufs {
					l.owner[bufAddr(b)] = s
				}
				s.idle = len(bufs)
				l.idle = append(l.idle, bufs...)
			}
		}
		if n := len(l.idle); n > 0 {
			// The last one idled first: a slab's buffers are used
			// together, so that whole slabs fall idle together.
			b := l.idle[n-1]
			l.idle[n-1] = nil
			l.idle = l.idle[:n-1]
			l.owner[bufAddr(b)].idle--
			return b
		}
	}
	return make([]byte, l.size)
}

// put keeps b for reuse.
func (l *freeList) put(b []byte) {
	if cap(b) != l.size {
		return
	}
	b = b[:l.size]
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.bufs) >= l.max {
		l.idleLocked(b)
		return
	}
	if l.timer == nil {
		// A period starts, with none that sat unused.
		l.low = 0
		l.timer = time.AfterFunc(trimEvery, l.trim)
	}
	l.bufs = append(l.bufs, b)
}

// idleLocked sets b aside: a slab buffer joins the idle ones, and a slab
// all of whose buffers are idle gives its memory back to the system; a
// heap buffer is left to the collector. It reports the heap bytes left.
func (l *freeList) idleLocked(b []byte) int {
	s := l.owner[bufAddr(b)]
	if s == nil {
		return len(b)
	}
	l.idle = append(l.idle, b)
	if s.idle++; s.idle*l.size == len(s.mem) {
		s.release()
	}
	return 0
}

// abandon gives up b for good: someone may still write into it (a reply
// that outlived its call). A slab buffer's memory goes back to the system
// at once (a late write finds fresh pages) and it is never handed out
// again; a heap buffer is left to the collector.
func (l *freeList) abandon(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.owner[bufAddr(b)]; s != nil {
		delete(l.owner, bufAddr(b))
		releaseRange(b[:cap(b)])
	}
}

// trim sets aside the buffers that sat unused since the last trim: the
// oldest ones, at the bottom of the stack. Their memory goes back to the
// system: a slab's once all its buffers are idle; the Go heap's at once
// when much of it was dropped (an idle agent allocates little, and the
// collector would otherwise find it only at its two-minute run).
func (l *freeList) trim() {
	l.mu.Lock()
	defer l.mu.Unlock()
	drop := l.low
	heap := 0
	for _, b := range l.bufs[:drop] {
		heap += l.idleLocked(b)
	}
	clear(l.bufs[:drop])
	l.bufs = append(l.bufs[:0], l.bufs[drop:]...)
	if heap >= releaseMin {
		go debug.FreeOSMemory()
	}
	l.low = len(l.bufs)
	if len(l.bufs) == 0 {
		l.timer = nil
		return
	}
	l.timer.Reset(trimEvery)
}
