package rpc

import (
	"sync"

	"pando.dev/pando/internal/wire"
)

// Data buffers (request data read, reads served, blocks pushed) are
// recycled in three size classes, 1, 4 and 16 MiB (wire.MaxData): a bulk
// transfer would otherwise allocate, and clear, a fresh block for every
// request, and collect it soon after.
var bufClasses = [...]int{1 << 20, 4 << 20, wire.MaxData}

var bufPools [len(bufClasses)]sync.Pool

// DataBuf returns a buffer of n (<= wire.MaxData) bytes and the function
// that gives it back; call that only once nothing uses the bytes any more
// (for a reply, once its frame is written: Reply.Release).
func DataBuf(n int) ([]byte, func()) {
	for i, size := range bufClasses {
		if n <= size {
			bp, _ := bufPools[i].Get().(*[]byte)
			if bp == nil {
				b := make([]byte, size)
				bp = &b
			}
			return (*bp)[:n], func() { bufPools[i].Put(bp) }
		}
	}
	return make([]byte, n), func() {}
}
