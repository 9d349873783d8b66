package transfer

import (
	"context"
	"sync"
)

// ring is the staging area between the side that reads blocks and the side
// that writes them, after GridFTP's ADTS I/O staging: a fixed set of
// buffers, so memory is bounded and the disk and the network each run at
// their own pace. Water marks keep a stalled reader from waking for every
// single freed buffer: once it found the ring empty, it resumes only when
// at least low buffers are free, then fills them in a burst.
type ring struct {
	mu      sync.Mutex
	cond    *sync.Cond
	free    [][]byte
	low     int
	starved bool
}

func newRing(n, size, low int) *ring {
	r := &ring{low: max(1, min(low, n))}
	r.cond = sync.NewCond(&r.mu)
	for range n {
		r.free = append(r.free, make([]byte, size))
	}
	return r
}

// get takes a free buffer, waiting as the water marks say; it returns nil
// when ctx ends.
func (r *ring) get(ctx context.Context) []byte {
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if ctx.Err() != nil {
			return nil
		}
		if len(r.free) == 0 {
			r.starved = true
		}
		if r.starved && len(r.free) >= r.low {
			r.starved = false
		}
		if !r.starved && len(r.free) > 0 {
			b := r.free[len(r.free)-1]
			r.free = r.free[:len(r.free)-1]
			return b[:cap(b)]
		}
		r.cond.Wait()
	}
}

// put returns a buffer.
func (r *ring) put(b []byte) {
	r.mu.Lock()
	r.free = append(r.free, b)
	if !r.starved || len(r.free) >= r.low {
		r.cond.Broadcast()
	}
	r.mu.Unlock()
}
