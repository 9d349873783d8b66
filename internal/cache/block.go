package cache

import (
	"os"
	"sync"
	"sync/atomic"
)

// A block's bytes in memory, shared by whoever holds it: the memory layer,
// the disk writer's queue (staged), and readers on their way to copy or
// send it (a FUSE reply is one until the kernel has the bytes).
//
// Full blocks that a fetch filled come from a pool and go back to it when
// the last holder lets go. A fresh buffer costs more than the copy into
// it: the kernel must find, clear and map new pages for it (on hosts that
// hand free memory back to theirs, several times the copy), and a cold
// read at 1 GB/s would ask for 1 GB/s of them.
//
// Every holder counts: hold when you take a block from where others can
// reach it, release when you no longer read it. A release too few costs
// the pool a buffer it never sees again; a release too many would hand out
// bytes still being read, so it panics.
type block struct {
	b    []byte
	refs atomic.Int32
	pool *freeList // where b goes when the last holder lets go; nil: nowhere
	kept bool      // b is never reused (see keep)
}

// plainBlock wraps bytes that are not recycled, held once by the caller.
func plainBlock(b []byte) *block {
	k := &block{b: b}
	k.refs.Store(1)
	return k
}

// hold adds a holder and returns k.
func (k *block) hold() *block {
	if k.refs.Add(1) <= 1 {
		panic("cache: a released block was held again")
	}
	return k
}

// release drops a holder; the last one returns the buffer to its pool.
func (k *block) release() {
	switch n := k.refs.Add(-1); {
	case n > 0:
	case n == 0:
		if k.pool != nil && k.kept {
			k.pool.abandon(k.b)
		} else if k.pool != nil {
			if poisonFreed {
				for i := range k.b {
					k.b[i] = 0xdb
				}
			}
			k.pool.put(k.b[:cap(k.b)])
		}
	default:
		panic("cache: a block was released more often than it was held")
	}
}

// keep gives up the block's recycling: for bytes that someone may still
// write into (a fetch that failed may have left its reply half-written).
func (k *block) keep() { k.kept = true }

// blockPools hold buffers of one block size each, as many as make up
// poolBytes.
var blockPools sync.Map // int64 -> *freeList

const poolBytes = 512 << 20

// poisonFreed makes release overwrite a buffer before it is reused (set in
// tests, by PANDO_POISON_FREED=1 in the environment): a reader
// that still used it would see the poison, not plausible bytes.
var poisonFreed = os.Getenv("PANDO_POISON_FREED") == "1"

// newBlock returns a block of n bytes, held once by the caller, for a
// cache of block size bs. Full blocks come from the pool for bs and are
// not cleared: the caller fills them whole.
func newBlock(n, bs int64) *block {
	if n != bs {
		return plainBlock(make([]byte, n))
	}
	p, _ := blockPools.Load(bs)
	if p == nil {
		p, _ = blockPools.LoadOrStore(bs, newFreeList(int(bs), max(1, poolBytes/int(bs))))
	}
	pool := p.(*freeList)
	k := &block{pool: pool, b: pool.get()[:n]}
	k.refs.Store(1)
	return k
}
