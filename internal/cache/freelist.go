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
// buffers, and gives back to the collector, every trimEvery, those it did
// not need in the period before: an idle agent holds none for long.
type freeList struct {
	size int
	max  int

	mu    sync.Mutex
	bufs  [][]byte
	low   int // fewest buffers held since the last trim
	timer *time.Timer
}

const (
	trimEvery  = 5 * time.Second
	releaseMin = 64 << 20 // bytes dropped at once that are handed back to the system
)

func newFreeList(size, max int) *freeList {
	return &freeList{size: size, max: max}
}

// get returns a buffer of l.size bytes, reused if there is one (its bytes
// are whatever they were).
func (l *freeList) get() []byte {
	l.mu.Lock()
	if n := len(l.bufs); n > 0 {
		b := l.bufs[n-1]
		l.bufs[n-1] = nil
		l.bufs = l.bufs[:n-1]
		l.low = min(l.low, len(l.bufs))
		l.mu.Unlock()
		return b
	}
	l.mu.Unlock()
	return make([]byte, l.size)
}

// put keeps b for reuse, unless the list is full.
func (l *freeList) put(b []byte) {
	if cap(b) != l.size {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.bufs) >= l.max {
		return
	}
	if l.timer == nil {
		// A period starts, with none that sat unused.
		l.low = 0
		l.timer = time.AfterFunc(trimEvery, l.trim)
	}
	l.bufs = append(l.bufs, b[:l.size])
}

// trim drops the buffers that sat unused since the last trim: the oldest
// ones, at the bottom of the stack. Dropping many of them also hands their
// memory back to the system at once: an idle agent allocates little, and
// the collector would otherwise find them only at its two-minute run.
func (l *freeList) trim() {
	l.mu.Lock()
	defer l.mu.Unlock()
	drop := l.low
	clear(l.bufs[:drop])
	l.bufs = append(l.bufs[:0], l.bufs[drop:]...)
	if drop*l.size >= releaseMin {
		go debug.FreeOSMemory()
	}
	l.low = len(l.bufs)
	if len(l.bufs) == 0 {
		l.timer = nil
		return
	}
	l.timer.Reset(trimEvery)
}
