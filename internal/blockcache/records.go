package blockcache

import "context"

// Range is a byte range of a file. The cache persists it in its index:
// its encoding is part of the cache's format on disk.
type Range struct {
	Off int64 `cbor:"1,keyasint"`
	Len int64 `cbor:"2,keyasint"`
}

// End is the first byte after r.
func (r Range) End() int64 { return r.Off + r.Len }

// Fetcher reads remote bytes at off into p; it returns how many it read
// (fewer at end of file) and io.EOF or nil. A cache calls it for the
// blocks it misses, with no lock held; one that knows the CRC32C of what
// it read says so with ReportSum.
type Fetcher func(ctx context.Context, p []byte, off int64) (int, error)

// Sum is what a Fetcher reported of the bytes it read (see ReportSum):
// OK, the CRC32C of the first N of them.
type Sum struct {
	N   int
	CRC uint32
	OK  bool
}

type sumKey struct{}

// WithSum returns a context for a call of a Fetcher, in which the
// Fetcher's ReportSum fills s.
func WithSum(ctx context.Context, s *Sum) context.Context {
	return context.WithValue(ctx, sumKey{}, s)
}

// ReportSum tells the cache, from inside a Fetcher, that the first n bytes
// it read have the CRC32C sum (the sum they were checked against on the
// wire). A Fetcher that does not call it costs the cache a pass over the
// block to compute it; outside a Fetcher it does nothing.
func ReportSum(ctx context.Context, n int, sum uint32) {
	if s, ok := ctx.Value(sumKey{}).(*Sum); ok {
		*s = Sum{N: n, CRC: sum, OK: true}
	}
}

// Metadata buckets (see Meta): the vfs's attribute and listing caches,
// persisted so that a restarted agent knows what it knew.
const (
	MetaAttr = "attr"
	MetaDir  = "dir"
)

// AllWrites, as Dirty.MarkClean's mark, takes every write made so far
// for sent.
const AllWrites = ^uint64(0)

// Entry describes one cached file: for `pando cache ls`, and for the
// files with dirty data to send after a restart (Dirty.DirtyKeys).
type Entry struct {
	Key, Name     string
	Version       uint64
	Size, Cached  int64
	Dirty, Pinned bool
}

// StageInfo is what the index records of a file's stage (see Stages).
type StageInfo struct {
	Name   string  // "" if none
	Staged []Range // sent ahead: no longer dirty
	Sent   []Range // dirty ranges in the stage, unchanged since
	// Stale: the file was cut at StaleFrom since the stage began.
	Stale     bool
	StaleFrom int64
}
