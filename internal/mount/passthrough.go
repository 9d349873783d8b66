package mount

import (
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"pando.dev/pando/internal/vfs"
)

// FUSE passthrough: a file the cache holds whole is read by the kernel
// straight from the cache's data file, at the speed of a local file (its
// page cache keeps large folios, which a FUSE file's does not), with no
// request reaching the agent.
//
// The kernel puts every open of an inode in one of two modes: cached (the
// agent answers reads, the kernel keeps its own page cache) or
// passthrough (all opens name the same backing file; those that must
// still go through the agent ask for direct I/O). An open that breaks the
// rule fails with EIO, so each node counts its opens by mode:
//   - while passthrough opens are out, every new open is passthrough with
//     the node's backing; it reads directly only if it is read-only and
//     the cache's current data file is that backing, else it asks for
//     direct I/O and the agent serves it (a writer; a reader of a newer
//     version, while older readers keep the version they opened);
//   - while cached or direct opens are out, new opens are cached or
//     direct;
//   - with none out, a read-only open of a whole cached file of at least
//     passthroughMin starts passthrough; any other open is cached. The
//     open writes the file's blocks still held only in memory to disk
//     first, and checks those not read since the agent started, if they
//     come to at most openWork or a quarter of the file; more is left to
//     the background after the file's last cached open.
//
// An open for direct I/O that is not passthrough (a large file read cold
// through the agent) takes no mode in the kernel, but go-fuse counts its
// Release against the backing it registered for passthrough opens (it
// counts every Release of the node, bridge.go releaseBackingIDRef): had
// passthrough started while it was out, its Release would unregister the
// backing under the passthrough opens, and the next open would be refused
// (EIO). So passthrough waits for direct opens to be released. The kernel
// sends RELEASE after close(2) has returned, and a program that reads a
// file again at once opens it before the agent hears of the first close:
// an open that finds only direct opens out whose descriptors were all
// closed (Flush came) waits for their Release, up to releaseWait, rather
// than be served by the agent again at a third of the speed of the data
// file.
//
// go-fuse drops its registration of the backing just after the agent's
// Release of the last open returns, and reuses it for an open that comes
// in between. The node therefore remembers the data file it last handed
// out (last), and starts passthrough on a different one only after a
// cached open has come and gone in between: that open, whatever go-fuse
// held, was a cached open in the kernel, since the kernel drops an inode's
// backing when its last passthrough file closes, before it tells us.
type passthrough struct {
	mu      sync.Mutex
	refs    int  // passthrough opens out
	cached  int  // cached opens out
	direct  int  // opens out for direct I/O, neither cached nor passthrough
	closing int  // of those, the ones whose descriptor was closed (Flush)
	waited  bool // an open waited for them in vain (see releaseWait)
	// released is closed when direct opens are all released
	released chan struct{}
	file     *os.File // the backing, while refs > 0
	gen      uint64   // its data file
	last     uint64   // the data file last handed out, if no cached open came since
}

// openWork, or a quarter of the file if that is more, bounds the disk
// work an open does to start passthrough (see cache.Backing). A second
// read right after a cold one finds the disk writer behind; it is better
// off waiting for it and then reading the data file than being served by
// the agent while the writer competes with it for the CPU (a quarter of a
// large file takes the writer about as long as the agent takes to serve
// the whole file). More work than that is left to the background, and the
// open is served by the agent: a program that only opens the file (a
// stat, a head) is not held up long.
const openWork = 64 << 20

// releaseWait bounds how long an open waits for the Release of direct
// opens whose descriptors were closed (see passthrough); the kernel sends
// it at once, but a busy agent may take a while to get to it. Waited in
// vain once (the descriptor was duplicated, and a copy is still open),
// opens do not wait again until the direct opens are gone.
const releaseWait = time.Second

// passthroughMin is the size from which a file is read in passthrough
// mode. Below it the kernel's page cache of the FUSE file serves rereads
// as well (the folios that make passthrough faster pay from megabytes),
// and an open costs no backing to register. Small files are also those
// most often written and read back at once: each switch of an inode
// between a writer's cached open and a passthrough open is a chance for
// the kernel to refuse the second (EIO) if its view of the first is
// behind the agent's, which small files then never take.
const passthroughMin = 1 << 20

// dropAfterClose is the size from which a file's page cache is dropped,
// and its blocks made ready for passthrough, after its last cached open
// (see closed): for smaller files both cost little at the next open.
const dropAfterClose = 16 << 20

// ptFile is an open file in passthrough mode.
type ptFile struct {
	*file
}

// PassthroughFd gives go-fuse the backing to register (called at most
// once per open, only when the node has none registered).
func (f *ptFile) PassthroughFd() (int, bool) {
	pt := &f.n.pt
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.file == nil {
		return -1, false
	}
	return int(pt.file.Fd()), true
}

// open decides an open's mode and returns its handle and open flags; pid
// is the opening thread as the kernel names it (the process, for a
// single-threaded program; 0 if unknown).
func (n *node) open(h *vfs.File, flags uint32, ff uint32, pid uint32) (any, uint32) {
	f := &file{h: h, m: n.m, n: n, pid: pid}
	readOnly := flags&syscall.O_ACCMODE == syscall.O_RDONLY && !n.m.noPassthrough
	var bf *os.File
	var gen uint64
	var ok bool
	if _, a := h.Opened(); readOnly && a.Size >= passthroughMin {
		bf, gen, ok = h.Backing(max(openWork, a.Size/4))
	}
	pt := &n.pt
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if ok && pt.refs == 0 && pt.cached == 0 && pt.direct > 0 && pt.direct == pt.closing && !pt.waited {
		pt.waitReleased()
	}
	switch {
	case pt.refs > 0:
		if ok {
			bf.Close()
		}
		if !ok || gen != pt.gen {
			h.Unback()
			ff |= fuse.FOPEN_DIRECT_IO
			n.m.directOpens.Add(1)
		} else {
			n.m.ptOpens.Add(1)
		}
		pt.refs++
		f.pt = true
		n.m.track(f)
		return &ptFile{f}, ff
	case pt.cached == 0 && pt.direct == 0 && ok && (pt.last == 0 || pt.last == gen):
		pt.refs, pt.file, pt.gen, pt.last = 1, bf, gen, gen
		n.m.ptOpens.Add(1)
		f.pt = true
		n.m.track(f)
		return &ptFile{f}, ff &^ fuse.FOPEN_KEEP_CACHE
	default:
		if ok {
			bf.Close()
			h.Unback()
		}
		if readOnly && n.m.directReads() && !n.smallReads.Load() && !n.m.smallReader(pid) {
			_, a := h.Opened()
			if a.Size >= dropAfterClose && h.Holdable() {
				ff |= fuse.FOPEN_DIRECT_IO
				ff &^= fuse.FOPEN_KEEP_CACHE
				f.direct = true
			}
		}
		if f.direct {
			// No mode in the kernel, and no backing in go-fuse:
			// last stays.
			pt.direct++
			n.m.directOpens.Add(1)
		} else {
			pt.cached++
			pt.last = 0
			n.m.cachedOpens.Add(1)
		}
		n.m.track(f)
		return f, ff
	}
}

// closed counts an open's end (at Release). When the last cached open of
// a large read-only file ends, the cache makes the file ready for
// passthrough in the background (blocks held only in memory are written
// to the data file, unchecked ones checked), and then the kernel's page
// cache of the FUSE file is dropped: the next open will read the data
// file directly, and would otherwise pay for dropping it in open(2),
// while the memory is held twice meanwhile.
func (n *node) closed(f *file) {
	pt := &n.pt
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if f.pt {
		if pt.refs--; pt.refs == 0 {
			pt.file.Close()
			pt.file = nil
		}
		return
	}
	fl, a := f.h.Opened()
	big := fl&syscall.O_ACCMODE == syscall.O_RDONLY && a.Size >= dropAfterClose
	if f.direct {
		pt.direct--
		if f.flushed {
			pt.closing--
		}
		if pt.direct == 0 {
			pt.waited = false
			if pt.released != nil {
				close(pt.released)
				pt.released = nil
			}
		}
	} else {
		pt.cached--
	}
	if pt.cached > 0 || pt.direct > 0 || pt.refs > 0 || n.m.noPassthrough || !big {
		return
	}
	go func() {
		if !f.h.Whole(true) {
			return
		}
		// Not under a cached open that came meanwhile (a direct open
		// leaves no pages to drop).
		pt.mu.Lock()
		defer pt.mu.Unlock()
		if pt.cached == 0 && !f.direct {
			n.NotifyContent(0, 0)
		}
	}()
}

// waitReleased waits (pt.mu held, and released meanwhile) until the
// direct opens out are released, up to releaseWait.
func (pt *passthrough) waitReleased() {
	if pt.released == nil {
		pt.released = make(chan struct{})
	}
	ch := pt.released
	pt.mu.Unlock()
	t := time.NewTimer(releaseWait)
	select {
	case <-ch:
	case <-t.C:
	}
	t.Stop()
	pt.mu.Lock()
	if pt.direct > 0 {
		pt.waited = true
	}
}

// flushed notes that a descriptor of a direct open was closed: its
// Release is likely on its way (see passthrough).
func (n *node) flushed(f *file) {
	if !f.direct {
		return
	}
	pt := &n.pt
	pt.mu.Lock()
	if !f.flushed {
		f.flushed = true
		pt.closing++
	}
	pt.mu.Unlock()
}

// asFile returns the open file behind a handle go-fuse passes back, in
// either mode (nil if there is none).
func asFile(h fs.FileHandle) *file {
	switch f := h.(type) {
	case *file:
		return f
	case *ptFile:
		return f.file
	}
	return nil
}

// Direct I/O costs a program that reads in small pieces a round trip to
// the agent for each piece, where the kernel's page cache would have
// gathered them into large reads. A direct open whose first reads average
// under smallRead marks its file and the thread that opened it
// (smallReader; the process, for a single-threaded program such as dd,
// tar or grep): their later opens go through the page cache.
const (
	smallRead    = 32 << 10
	smallReads   = 64 // reads looked at
	maxSmallPids = 4096
)

// sawReads records what a direct open's reads were like (see smallRead).
func (f *file) sawReads(n int64) {
	if !f.direct {
		return
	}
	f.dmu.Lock()
	f.reads++
	done := f.reads == smallReads
	small := done && f.read < smallReads*smallRead
	f.dmu.Unlock()
	if !small {
		return
	}
	f.n.smallReads.Store(true)
	if f.pid != 0 {
		m := f.m
		m.mu.Lock()
		if m.smallPids == nil || len(m.smallPids) >= maxSmallPids {
			m.smallPids = make(map[uint32]bool)
		}
		m.smallPids[f.pid] = true
		m.mu.Unlock()
	}
}

// smallReader reports whether thread pid was seen reading a direct open
// in small pieces.
func (m *Mount) smallReader(pid uint32) bool {
	if pid == 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.smallPids[pid]
}

// directReads reports whether the kernel lets programs map files opened
// for direct I/O shared (FUSE_DIRECT_IO_ALLOW_MMAP, Linux 6.6): large
// files read through the agent are opened so only then, so that no
// program that maps one finds it refused.
func (m *Mount) directReads() bool {
	in := m.server.KernelSettings()
	return in.Flags64()&fuse.CAP_DIRECT_IO_ALLOW_MMAP != 0
}
