package remote

import (
	"path"
	"strings"

	"pando.dev/pando/internal/wire"
)

// Resolve places the cleaned global path g by a mount table: under the
// longest prefix at or above it, at the path inside that prefix's share.
// A g under no prefix gets a Loc with only Global set (a directory above
// the mounts, or nothing).
func Resolve(mounts []wire.MountEntry, g string) Loc {
	var best *wire.MountEntry
	for i := range mounts {
		m := &mounts[i]
		if Under(g, m.Prefix) && (best == nil || len(m.Prefix) > len(best.Prefix)) {
			best = m
		}
	}
	if best == nil {
		return Loc{Global: g}
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(g, best.Prefix), "/")
	rel = strings.Trim(path.Join(best.SharePath, rel), "/")
	if rel == "." {
		rel = ""
	}
	return Loc{Global: g, Prefix: best.Prefix, Share: best.Share, Rel: rel}
}

// Under reports whether p is prefix or below it, component-wise.
func Under(p, prefix string) bool {
	return p == prefix || prefix == "/" || strings.HasPrefix(p, prefix+"/")
}
