package cache

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestRecycledBlocksAreNeverLentTwice: readers that hold slices of
// blocks while the memory layer evicts and forgets them, the disk writer
// writes them, files are dropped and refetched, and truncated, always see
// the bytes they asked for. Freed buffers are poisoned (see block.go), so
// a buffer handed out again while a reader still held it shows.
func TestRecycledBlocksAreNeverLentTwice(t *testing.T) {
	const bs = 4096
	c := open(t, t.TempDir(), Options{BlockSize: bs, MemoryBytes: 8 * bs, DiskBytes: 24 * bs})
	files := make([]*remote, 4)
	for i := range files {
		r := &remote{Data: make([]byte, 16*bs)}
		for j := range r.Data {
			r.Data[j] = byte(i*31 + j*7 + j>>12)
		}
		files[i] = r
	}
	key := func(i int) string { return string(rune('a' + i)) }
	for i, r := range files {
		c.Validate(key(i), 1, int64(len(r.Data)), "/"+key(i))
		c.Pin(key(i))
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Second)
	errs := make(chan error, 16)
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			buf := make([]byte, bs)
			for ops := 0; ops < 20000 && time.Now().Before(deadline); ops++ {
				i := rng.IntN(len(files))
				r := files[i]
				off := int64(rng.IntN(len(r.Data)/bs)) * bs
				switch rng.IntN(6) {
				case 0, 1, 2:
					so := off + int64(rng.IntN(bs/2))
					b, release, ok, err := c.Slice(ctx, key(i), so, bs/2, r.Fetch)
					if err != nil {
						errs <- err
						return
					}
					if !ok {
						continue
					}
					if rng.IntN(4) == 0 {
						time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
					}
					if !bytes.Equal(b, r.Data[so:so+int64(len(b))]) {
						errs <- errBadSlice
						release()
						return
					}
					release()
				case 3:
					n, err := c.ReadAt(ctx, key(i), buf, off, r.Fetch)
					if err != nil && err != io.EOF {
						errs <- err
						return
					}
					if !bytes.Equal(buf[:n], r.Data[off:off+int64(n)]) {
						errs <- errBadRead
						return
					}
				case 4:
					c.Forget(key(i), 0, int64(len(r.Data)))
				case 5:
					if rng.IntN(20) == 0 {
						c.Drop(key(i))
						c.Validate(key(i), 1, int64(len(r.Data)), "/"+key(i))
					} else {
						_ = c.Prefetch(ctx, key(i), off/bs, r.Fetch)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

var (
	errBadSlice = errorString("a slice lent by the cache changed while it was held")
	errBadRead  = errorString("a read returned bytes other than the file's")
)

type errorString string

func (e errorString) Error() string { return string(e) }

// TestFreeListTrimsWhatSatUnused: buffers not needed for a whole trim
// period go back to the collector; those in use since stay.
func TestFreeListTrimsWhatSatUnused(t *testing.T) {
	l := newFreeList(64, 4)
	bufs := [][]byte{l.get(), l.get(), l.get(), l.get(), l.get()}
	for _, b := range bufs {
		l.put(b)
	}
	if l.len() != 4 {
		t.Fatalf("the list holds %d buffers, more than its bound of 4", l.len())
	}
	l.trim() // all four were freed in this period: none goes
	if l.len() != 4 {
		t.Fatalf("after a trim the list holds %d buffers; want the 4 freed in the period", l.len())
	}
	b := l.get()
	if &b[0] != &bufs[3][0] {
		t.Fatal("the most recently freed buffer was not handed out first")
	}
	l.put(b)
	l.trim() // three sat unused the whole period
	if l.len() != 1 {
		t.Fatalf("after a trim the list holds %d buffers; want the 1 used in the period", l.len())
	}
	l.trim()
	if l.len() != 0 {
		t.Fatalf("after a trim of an unused list it holds %d buffers; want 0", l.len())
	}
}

// len returns how many buffers l holds.
func (l *freeList) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.bufs)
}

// residentPages reports how many of the pages under b are in memory.
func residentPages(t *testing.T, b []byte) int {
	t.Helper()
	vec := make([]byte, (len(b)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestSlabsGoBackWhole: block buffers are cut from aligned slabs of huge
// page size; a slab's memory goes back to the system once all its buffers
// sat unused for a trim period, and its buffers are reused rather than
// mapped anew; an abandoned buffer's memory goes back at once and the
// buffer is never handed out again.
func TestSlabsGoBackWhole(t *testing.T) {
	const bs = 1 << 20
	l := newFreeList(bs, 8)
	if !l.slabs {
		t.Fatal("1 MiB buffers are not cut from slabs")
	}
	mapped := slabsMapped.Load()
	a, b := l.get(), l.get()
	if got := slabsMapped.Load() - mapped; got != slabSize {
		t.Fatalf("two 1 MiB buffers mapped %d bytes; want one slab of %d", got, slabSize)
	}
	lo := min(bufAddr(a), bufAddr(b))
	if lo%slabSize != 0 || max(bufAddr(a), bufAddr(b))-lo != bs {
		t.Fatalf("buffers at %#x and %#x are not the two halves of an aligned slab", bufAddr(a), bufAddr(b))
	}
	for i := range a {
		a[i], b[i] = 1, 2
	}
	l.put(a)
	l.trim() // b is in use: a stays listed
	if residentPages(t, a) == 0 {
		t.Fatal("a listed buffer lost its memory")
	}
	l.trim() // a sat unused a whole period, but b is in use: the slab stays
	if residentPages(t, a) == 0 || residentPages(t, b) == 0 {
		t.Fatal("a slab with a buffer in use gave its memory back")
	}
	l.put(b)
	l.trim()
	l.trim() // both idle: the slab goes back
	if n := residentPages(t, a) + residentPages(t, b); n != 0 {
		t.Fatalf("%d pages of an idle slab are still in memory", n)
	}
	c, d := l.get(), l.get()
	if got := slabsMapped.Load() - mapped; got != slabSize {
		t.Fatalf("reusing an idle slab mapped %d bytes more", got-slabSize)
	}
	if min(bufAddr(c), bufAddr(d)) != lo {
		t.Fatal("the idle slab's buffers were not handed out again")
	}
	c[0] = 3
	l.abandon(c)
	if residentPages(t, c) != 0 {
		t.Fatal("an abandoned buffer kept its memory")
	}
	for range 4 {
		if e := l.get(); bufAddr(e) == bufAddr(c) {
			t.Fatal("an abandoned buffer was handed out again")
		}
	}
	_ = d
}
