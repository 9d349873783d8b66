package vfs

import (
	"fmt"
	"log/slog"
	"time"

	"pando.dev/pando/internal/consistency"
)

// callbackWait is how long an idle long poll under callback waits before
// it returns (a heartbeat); the lease it renews is consistency.Lease.
const callbackWait = time.Second

// WriteMode says when written data reaches the share.
type WriteMode int

// Write modes.
const (
	WriteClose   WriteMode = iota // on the last close
	WriteThrough                  // before each write returns
	// WriteBack keeps writes in the cache while the share has granted a
	// write delegation (callback only); close mode otherwise.
	WriteBack
)

func (w WriteMode) String() string {
	switch w {
	case WriteThrough:
		return "through"
	case WriteBack:
		return "back"
	}
	return "close"
}

// ParseWriteMode parses "close", "through" or "back".
func ParseWriteMode(s string) (WriteMode, error) {
	switch s {
	case "close":
		return WriteClose, nil
	case "through":
		return WriteThrough, nil
	case "back":
		return WriteBack, nil
	}
	return 0, fmt.Errorf("unknown write mode %q; use close, through or back", s)
}

// Check reports options that do not fit together.
func (o *Options) Check() error {
	if o.Write != WriteBack || consistency.Any(o.Consistency, o.Policies, consistency.ModeCallback) {
		return nil
	}
	return fmt.Errorf("write mode back needs write delegations, which only the callback consistency mode has; add --consistency callback (or a --policy PREFIX=callback), or use --write close")
}

// Options configure a file system.
type Options struct {
	Consistency consistency.Consistency
	Policies    []consistency.Policy // overrides of Consistency by path prefix
	Write       WriteMode
	// ReadAhead is how many blocks to keep in flight ahead of a sequential
	// reader (default 16: 16 MiB, the bandwidth-delay product of 1 Gbit/s
	// at 128 ms). On a path whose measured bandwidth-delay product asks
	// for more, read-ahead keeps up to ReadAheadMax blocks in flight
	// (default: 64 MiB of blocks when ReadAhead is left at its default,
	// else ReadAhead: a depth that was asked for is kept).
	ReadAhead    int
	ReadAheadMax int
	Log          *slog.Logger
	// Offline says what is done with cached data while its share cannot
	// be reached (see offline.go).
	Offline Offline
	// MaxUnsent bounds the data not yet sent that the cache accepts while
	// a share cannot be reached (writes kept back under a write
	// delegation): past it, writes fail with EHOSTUNREACH. 0: half the
	// cache's dirty limit (cache.DirtyLimit), which also caps it.
	MaxUnsent int64
	// MetaEntries bounds the metadata kept in memory: attributes (one
	// each) and listings (one plus one per entry), each kind up to this
	// many, the least recently used dropped first. 0: DefaultMetaEntries.
	MetaEntries int
}

// DefaultMetaEntries is the default bound of Options.MetaEntries: the
// metadata of a tree of 200,000 files, at most about 120 MiB (an attribute
// kept costs about 250 bytes, twice: fresh and last known, see offline.go;
// a listing's entry about 110).
const DefaultMetaEntries = 200_000

// rule returns the consistency rule of a global path: that of the longest
// matching policy prefix, else the default. Every freshness decision of
// the file system asks it.
func (o *Options) rule(p string) consistency.Rule {
	return consistency.For(o.Consistency, o.Policies, p).Rule()
}
