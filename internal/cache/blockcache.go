package cache

import "pando.dev/pando/internal/blockcache"

// A Cache is the block cache the vfs holds: package blockcache says what
// each of its methods must do.
var _ blockcache.Cache = (*Cache)(nil)

// The records the cache shares with the vfs are blockcache's; the index
// encodes them as it always has.
type (
	Range     = blockcache.Range
	Fetcher   = blockcache.Fetcher
	Entry     = blockcache.Entry
	StageInfo = blockcache.StageInfo
)

const (
	MetaAttr  = blockcache.MetaAttr
	MetaDir   = blockcache.MetaDir
	AllWrites = blockcache.AllWrites
)
