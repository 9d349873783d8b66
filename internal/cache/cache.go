package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fxamacker/cbor/v2"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"pando.dev/pando/internal/holder"
)

// Options size a cache.
type Options struct {
	Dir         string
	BlockSize   int64 // default 1 MiB
	DiskBytes   int64 // default: a share of the free space (see diskBound)
	MemoryBytes int64 // default 512 MiB
	Log         *slog.Logger
}

// Stats counts what the cache did.
type Stats struct {
	Hits, Misses, Fetches, BadBlocks, Evictions int64
	Full                                        int64 // writes that found the cache's file system full (and evicted)
	BytesFetched                                int64
	Preloaded                                   int64 // bytes of data files loaded into the page cache
	WrittenAround                               int64 // bytes of blocks written to disk around the page cache (O_DIRECT)
	DiskBytes, MemoryBytes                      int64
	DiskLimit                                   int64 // the disk layer's bound
	DirtyBytes                                  int64 // blocks holding data not yet at the share
	SentAhead                                   int64 // bytes sent to the share ahead of a close, to make room
	Files                                       int
}

// Cache is a block cache. It is safe for concurrent use.
type Cache struct {
	opts Options
	db   *bolt.DB
	log  *slog.Logger

	mu       sync.Mutex
	entries  map[string]*entry
	flights  map[blockID]*flight
	diskUsed atomic.Int64  // bytes of blocks on disk (changed with e.mu held)
	dirty    atomic.Int64  // blocks holding dirty data (changed with e.mu held; see setDirty)
	mem      *memLRU       // has its own lock
	clock    atomic.Int64  // logical time of last use, for LRU
	incs     atomic.Uint64 // names data files given out as backings

	idxMu    sync.Mutex
	flushMu  sync.Mutex                   // one index flush at a time, so Persist sees its records committed
	dirtyIdx map[string]bool              // index records to write
	metaIdx  map[string]map[string][]byte // bucket -> key -> value to write (nil: delete)

	stats struct {
		hits, misses, fetches, bad, evictions, fetched, preloaded, full, ahead, around atomic.Int64
	}
	flushQuit chan struct{}
	flushDone chan struct{}

	// staged carries fetched blocks to the disk writer, so that a slow
	// disk never holds up a reader (GridFTP's staging lesson).
	staged     chan blockID
	writerQuit chan struct{}
	writerDone chan struct{}

	noDirect    atomic.Bool  // the cache's file system refuses O_DIRECT
	lastRead    atomic.Int64 // when a read last came through the cache (unix ns)
	preMu       sync.Mutex
	preStop     chan struct{} // closed to end the preload under way
	preloadQuit chan struct{}
	preloadMax  int64 // the largest file Preload loads (see preloadBound)
	behind      int   // blocks queued from which the writer is behind (see writerBehind)
}

type blockID struct {
	key string
	idx int64
}

type flight struct {
	done chan struct{}
	err  error
}

// record is the persisted index of one file.
type record struct {
	Version uint64              `cbor:"1,keyasint"`
	Size    int64               `cbor:"2,keyasint"`
	Blocks  map[int64]blockInfo `cbor:"3,keyasint"`
	Dirty   []Range             `cbor:"4,keyasint,omitempty"`
	Use     int64               `cbor:"5,keyasint"`
	Name    string              `cbor:"6,keyasint,omitempty"` // for people: the path last seen
	Tags    []string            `cbor:"7,keyasint,omitempty"`
	// Cut: the size was set here (an open with O_TRUNC) and goes to the
	// share with the data, exactly; unsent like dirty ranges.
	Cut bool `cbor:"8,keyasint,omitempty"`
	// Stage names the share's stage that holds the Staged ranges: dirty
	// data sent ahead of the close, not yet committed (see staged.go).
	Stage  string  `cbor:"9,keyasint,omitempty"`
	Staged []Range `cbor:"10,keyasint,omitempty"`
	// Sent: dirty ranges whose bytes, unchanged since, a write-back put
	// in the stage (a later one need not send them again).
	Sent []Range `cbor:"11,keyasint,omitempty"`
	// Stale: the file was cut at StaleFrom since its stage began; what
	// the stage holds beyond is not the file's any more.
	Stale     bool  `cbor:"12,keyasint,omitempty"`
	StaleFrom int64 `cbor:"13,keyasint,omitempty"`
}

// unsent reports whether e holds data or a size not yet at the share (e.mu held).
func (e *entry) unsent() bool { return len(e.rec.Dirty) > 0 || e.rec.Cut || len(e.rec.Staged) > 0 }

// blockInfo describes a block on disk: its length and the CRC32C of it.
type blockInfo struct {
	Len uint32 `cbor:"1,keyasint"`
	CRC uint32 `cbor:"2,keyasint"`
}

type entry struct {
	key  string
	mu   sync.Mutex
	rec  record
	f    *os.File
	pins int             // changed under c.mu and mu both
	io   int             // reads and writes of f under way without e.mu
	use  map[int64]int64 // block -> logical time of last use (not persisted)
	hit  atomic.Int64    // logical time of the last memory hit

	pmu     sync.Mutex
	pending map[int64]staged // fetched blocks on their way to disk

	// dmu is held while blocks are written to the data file, so that a
	// staged block and a write of the same block reach the disk in the
	// order the index records them; e.mu may be taken while it is held,
	// never the other way round.
	dmu sync.Mutex

	// gen changes whenever the entry's blocks are written, truncated or
	// dropped: a fetch that started before must not cache what it got.
	gen atomic.Uint64
	wmu sync.Mutex // serialises WriteAt and Truncate of this file

	// Write marks (under mu, not persisted): wseq numbers the changes of
	// the file's bytes and size made here; written holds, per dirty
	// block, the number of its last write, and sized that of the last
	// change of the size. A write-back that took the dirty ranges at
	// mark m (DirtyAt) marks clean only what was not written after m
	// (MarkClean): the file may be written while its data is on the way.
	wseq    uint64
	written map[int64]uint64
	sized   uint64

	// unchecked holds the blocks found on disk at start that have not
	// been read (and so checked) since; backed counts the backings of
	// the data file (named inc) the kernel may be reading directly;
	// retired are data files given up while reads of them were under way.
	unchecked map[int64]struct{}
	backed    int
	inc       uint64
	retired   []*os.File
}

var (
	bucketIndex = []byte("index")
	castagnoli  = crc32.MakeTable(crc32.Castagnoli)
)

// Open opens (or creates) a cache in opts.Dir.
func Open(opts Options) (*Cache, error) {
	if opts.BlockSize <= 0 {
		opts.BlockSize = 1 << 20
	}
	if opts.MemoryBytes < 0 {
		opts.MemoryBytes = 0
	} else if opts.MemoryBytes == 0 {
		opts.MemoryBytes = 512 << 20
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Join(opts.Dir, "data"), 0o700); err != nil {
		return nil, fmt.Errorf("cannot create the cache directory: %w", err)
	}
	db, err := bolt.Open(filepath.Join(opts.Dir, "index.db"), 0o600, &bolt.Options{Timeout: time.Second, NoSync: true, NoFreelistSync: true})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("the cache in %s is in use by another pando agent%s; give each agent its own --cache-dir", opts.Dir, holder.By(holder.Lock(filepath.Join(opts.Dir, "index.db"))))
	}
	if err != nil {
		return nil, fmt.Errorf("cannot open the cache index: %w", err)
	}
	c := &Cache{opts: opts, db: db, log: opts.Log, entries: make(map[string]*entry), flights: make(map[blockID]*flight),
		mem: newMemLRU(opts.MemoryBytes), dirtyIdx: make(map[string]bool), metaIdx: make(map[string]map[string][]byte),
		flushQuit: make(chan struct{}), flushDone: make(chan struct{})}
	if err := c.load(); err != nil {
		db.Close()
		return nil, err
	}
	// Sized once what the cache holds is known: that space is its own.
	c.opts.DiskBytes = c.diskBound(opts.DiskBytes)
	// As many staged blocks as the memory layer holds: a block dropped
	// from the queue stays in memory only, and a file with such blocks
	// cannot be read by the kernel from the data file (see Backing).
	c.staged = make(chan blockID, max(256, opts.MemoryBytes/opts.BlockSize))
	c.writerDone = make(chan struct{})
	c.writerQuit = make(chan struct{})
	c.preloadQuit = make(chan struct{})
	c.preloadMax = preloadBound()
	c.behind = behindBlocks
	go c.flusher()
	go c.writer()
	return c, nil
}

// BlockSize is the cache's block size.
func (c *Cache) BlockSize() int64 { return c.opts.BlockSize }

func (c *Cache) load() error {
	return c.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketIndex)
		if err != nil {
			return err
		}
		return b.ForEach(func(k, v []byte) error {
			var rec record
			if err := cbor.Unmarshal(v, &rec); err != nil {
				c.log.Warn("dropping a damaged cache index record", "key", string(k))
				return nil
			}
			if rec.Blocks == nil {
				rec.Blocks = make(map[int64]blockInfo)
			}
			e := &entry{key: string(k), rec: rec, unchecked: make(map[int64]struct{}, len(rec.Blocks))}
			for idx := range rec.Blocks {
				e.unchecked[idx] = struct{}{}
			}
			c.entries[e.key] = e
			c.diskUsed.Add(int64(len(rec.Blocks)) * c.opts.BlockSize)
			c.dirty.Add(dirtyBlocks(rec.Dirty, c.opts.BlockSize))
			if rec.Use > c.clock.Load() {
				c.clock.Store(rec.Use)
			}
			return nil
		})
	})
}

// Close persists the index and closes every file.
func (c *Cache) Close() error {
	close(c.preloadQuit)
	close(c.writerQuit)
	<-c.writerDone
	close(c.flushQuit)
	<-c.flushDone
	err := c.flushIndex()
	c.mu.Lock()
	for _, e := range c.entries {
		e.mu.Lock()
		if e.f != nil {
			e.f.Close()
			e.f = nil
		}
		for _, f := range e.retired {
			f.Close()
		}
		e.retired = nil
		e.mu.Unlock()
	}
	c.mu.Unlock()
	c.mem.clear()
	if cerr := c.db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// A clean close syncs once, so that a power loss after it loses nothing.
		err = syncDir(c.opts.Dir)
	}
	return err
}

// touch marks an entry's index record as changed.
func (c *Cache) touch(key string) {
	c.idxMu.Lock()
	c.dirtyIdx[key] = true
	c.idxMu.Unlock()
}

// get returns the entry for key, creating it (c.mu held).
func (c *Cache) get(key string) *entry {
	e := c.entries[key]
	if e == nil {
		e = &entry{key: key, rec: record{Blocks: make(map[int64]blockInfo)}}
		c.entries[key] = e
	}
	return e
}

func (c *Cache) dataPath(key string) string {
	h := sha256.Sum256([]byte(key))
	return filepath.Join(c.opts.Dir, "data", hex.EncodeToString(h[:12]))
}

// file returns the entry's data file, opening it (e.mu held).
func (c *Cache) file(e *entry) (*os.File, error) {
	if e.f != nil {
		return e.f, nil
	}
	f, err := os.OpenFile(c.dataPath(e.key), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cache data file: %w", err)
	}
	e.f = f
	return f, nil
}

// doneFile closes the data file of an entry nobody has open (e.mu held):
// a cache of many files must not hold a descriptor for each.
func (c *Cache) doneFile(e *entry) {
	if e.io == 0 && e.retired != nil {
		for _, f := range e.retired {
			f.Close()
		}
		e.retired = nil
	}
	if e.pins == 0 && e.io == 0 && e.f != nil {
		e.f.Close()
		e.f = nil
	}
}

// Validate records the remote version and size of key. If the version
// differs from the cached one, clean blocks are dropped; dirty ranges are
// kept (the caller decides what a conflict means). It reports whether
// cached data was kept.
func (c *Cache) Validate(key string, version uint64, size int64, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.get(key)
	e.mu.Lock()
	defer e.mu.Unlock()
	if name != "" && e.rec.Name != name {
		e.rec.Name = name
		c.touch(key)
	}
	if e.rec.Version == version {
		if !e.unsent() && e.rec.Size != size {
			e.rec.Size = size
			c.touch(key)
		}
		return true
	}
	kept := e.rec.Version == 0 && len(e.rec.Blocks) == 0
	if !e.unsent() {
		c.dropBlocksLocked(e, 0)
		e.rec.Size = size
	}
	e.rec.Version = version
	c.touch(key)
	return kept
}

// SetVersion records a version without dropping data: for versions that
// this agent's own writes produced.
func (c *Cache) SetVersion(key string, version uint64, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.get(key)
	e.mu.Lock()
	e.rec.Version = version
	if !e.unsent() {
		e.rec.Size = size
	}
	e.mu.Unlock()
	c.touch(key)
}

// Version returns the cached version and size of key.
func (c *Cache) Version(key string) (uint64, int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e == nil {
		return 0, 0, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rec.Version, e.rec.Size, true
}

// dropBlocksLocked drops clean blocks from index from on (c.mu, e.mu held).
func (c *Cache) dropBlocksLocked(e *entry, from int64) {
	e.gen.Add(1)
	e.dropAllPending(from)
	c.mem.dropFile(e.key, from)
	for idx := range e.rec.Blocks {
		if idx >= from && !e.dirtyBlock(idx, c.opts.BlockSize) {
			delete(e.rec.Blocks, idx)
			c.diskUsed.Add(-c.opts.BlockSize)
			c.mem.remove(blockID{e.key, idx})
		}
	}
	if from == 0 && len(e.rec.Blocks) == 0 {
		c.detach(e)
		if e.f != nil {
			_ = e.f.Truncate(0)
		} else {
			// Not created only to be emptied: a file the cache never
			// held (the contents a listing brought) has none yet.
			_ = os.Truncate(c.dataPath(e.key), 0)
		}
		c.doneFile(e)
	}
}

// Pin keeps key's blocks from eviction until Unpin (open files).
func (c *Cache) Pin(key string) {
	c.mu.Lock()
	e := c.get(key)
	e.mu.Lock() // pins changes under both locks: either is enough to read it
	e.pins++
	e.mu.Unlock()
	c.mu.Unlock()
}

// Unpin undoes Pin. The data file of a file nobody has open is closed,
// so that a cache of many files does not hold as many descriptors.
func (c *Cache) Unpin(key string) {
	c.mu.Lock()
	if e := c.entries[key]; e != nil && e.pins > 0 {
		e.mu.Lock()
		e.pins--
		if e.pins == 0 {
			c.doneFile(e)
		}
		e.mu.Unlock()
	}
	c.mu.Unlock()
	c.evict()
}

// Drop forgets key entirely (its blocks and index record), dirty data too.
func (c *Cache) Drop(key string) {
	c.mu.Lock()
	e := c.entries[key]
	if e == nil {
		c.mu.Unlock()
		return
	}
	delete(c.entries, key)
	e.gen.Add(1)
	e.dropAllPending(0)
	c.mem.dropFile(key, 0)
	e.mu.Lock()
	c.diskUsed.Add(-int64(len(e.rec.Blocks)) * c.opts.BlockSize)
	c.setDirty(e, nil)
	for idx := range e.rec.Blocks {
		c.mem.remove(blockID{key, idx})
	}
	if e.f != nil && e.io == 0 {
		e.f.Close()
		e.f = nil
	}
	e.mu.Unlock()
	c.touch(key)
	c.mu.Unlock()
	os.Remove(c.dataPath(key))
}

// ErrBadBlock is returned by readBlock for a block whose CRC does not match.
var ErrBadBlock = errors.New("cached block failed its checksum")
