package cache

import (
	"container/list"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// memLRU keeps recently used blocks in memory, bounded in bytes.
type memLRU struct {
	mu        sync.Mutex
	max, used int64
	ll        *list.List
	items     map[blockID]*list.Element
	perKey    map[string]int // blocks held by file, so that dropFile of one with none costs nothing
}

type memItem struct {
	id  blockID
	blk *block // held by the memory layer
}

func newMemLRU(max int64) *memLRU {
	return &memLRU{max: max, ll: list.New(), items: make(map[blockID]*list.Element), perKey: make(map[string]int)}
}

func (m *memLRU) size() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used
}

// get returns block id held for the caller, or nil.
func (m *memLRU) get(id blockID) *block {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el := m.items[id]; el != nil {
		m.ll.MoveToFront(el)
		return el.Value.(*memItem).blk.hold()
	}
	return nil
}

func (m *memLRU) has(id blockID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.items[id] != nil
}

// put keeps blk as block id (holding it for the memory layer).
func (m *memLRU) put(id blockID, blk *block) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.max <= 0 || int64(len(blk.b)) > m.max {
		m.removeLocked(id)
		return
	}
	blk.hold()
	if el := m.items[id]; el != nil {
		it := el.Value.(*memItem)
		m.used += int64(len(blk.b)) - int64(len(it.blk.b))
		it.blk.release()
		it.blk = blk
		m.ll.MoveToFront(el)
	} else {
		m.items[id] = m.ll.PushFront(&memItem{id, blk})
		m.perKey[id.key]++
		m.used += int64(len(blk.b))
	}
	for m.used > m.max {
		m.removeLocked(m.ll.Back().Value.(*memItem).id)
	}
}

// clear lets go of every block (their buffers go back to their pool once
// no reader holds them).
func (m *memLRU) clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id := range m.items {
		m.removeLocked(id)
	}
}

func (m *memLRU) remove(id blockID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removeLocked(id)
}

func (m *memLRU) removeLocked(id blockID) {
	if el := m.items[id]; el != nil {
		it := el.Value.(*memItem)
		m.used -= int64(len(it.blk.b))
		m.ll.Remove(el)
		delete(m.items, id)
		if m.perKey[id.key]--; m.perKey[id.key] <= 0 {
			delete(m.perKey, id.key)
		}
		it.blk.release()
	}
}

// punchHole frees a block's disk space without changing the file's size.
func punchHole(f *os.File, off, n int64) {
	_ = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}

// dropFile removes the blocks of key from index from on: blocks that are
// only in memory (staged, not yet on disk) must go too when a file is
// truncated or its version changes.
func (m *memLRU) dropFile(key string, from int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.perKey[key] == 0 {
		return
	}
	for id := range m.items {
		if id.key == key && id.idx >= from {
			m.removeLocked(id)
		}
	}
}

// Forget drops from the memory layer the blocks of key that lie wholly in
// [from, to): behind a sequential reader of a large file, which the kernel
// and the data file serve if it comes back, they would only push out
// blocks worth keeping (and hold memory the runtime could reuse). Blocks
// on their way to disk stay readable until they are there.
func (c *Cache) Forget(key string, from, to int64) {
	bs := c.opts.BlockSize
	c.mem.removeRange(key, (from+bs-1)/bs, to/bs)
}

// removeRange removes blocks [from, to) of key.
func (m *memLRU) removeRange(key string, from, to int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for idx := from; idx < to; idx++ {
		m.removeLocked(blockID{key, idx})
	}
}
