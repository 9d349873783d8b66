package remote

import (
	"path"
	"strings"

	"pando.dev/pando/internal/wire"
)

// Resolve places the cleaned global path g by a mount table: under the
// longest prefix at or above it (MountOf), at the path inside that
// prefix's share (the mount's primary location). A g under no prefix gets
// a Loc with only Global set (a directory above the mounts, or nothing).
func Resolve(mounts []wire.MountEntry, g string) Loc {
	m := MountOf(mounts, g)
	if m == nil {
		return Loc{Global: g}
	}
	return Loc{Global: g, Prefix: m.Prefix, Share: m.Share, Rel: RelPath(m.SharePath, g, m.Prefix)}
}

// MountOf returns the entry of mounts with the longest prefix at or above
// the cleaned global path g, or nil if there is none.
func MountOf(mounts []wire.MountEntry, g string) *wire.MountEntry {
	var best *wire.MountEntry
	for i := range mounts {
		m := &mounts[i]
		if Under(g, m.Prefix) && (best == nil || len(m.Prefix) > len(best.Prefix)) {
			best = m
		}
	}
	return best
}

// RelPath is the share-relative path of the global path g, below the
// mount prefix, at a location whose share path stands for prefix.
func RelPath(sharePath, g, prefix string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(g, prefix), "/")
	rel = strings.Trim(path.Join(sharePath, rel), "/")
	if rel == "." {
		rel = ""
	}
	return rel
}

// Under reports whether p is prefix or below it, component-wise.
func Under(p, prefix string) bool {
	return p == prefix || prefix == "/" || strings.HasPrefix(p, prefix+"/")
}
