package client

import (
	"strings"

	"pando.dev/pando/internal/wire"
)

// checkListing refuses a listing that names anything but the distinct
// entries of one directory: a name that is empty, "." or "..", holds a
// slash or a NUL, or comes twice. Shares belong to other organisations;
// a name like "../x" would otherwise have the caches above take what the
// listing says of x for a file outside the directory listed, perhaps on
// another share.
func checkListing(entries []wire.DirEntry, loc Loc) error {
	seen := make(map[string]struct{}, len(entries))
	for _, e := range entries {
		if !validName(e.Name) {
			return wire.Errorf(wire.CodeIO, "share %s listed %s with the entry %q, which is not a file name; the listing is refused", loc.Share, loc.Global, e.Name)
		}
		if _, dup := seen[e.Name]; dup {
			return wire.Errorf(wire.CodeIO, "share %s listed %s with the entry %q twice; the listing is refused", loc.Share, loc.Global, e.Name)
		}
		seen[e.Name] = struct{}{}
	}
	return nil
}

// validName reports whether name is one component of a path.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= 255 && !strings.ContainsAny(name, "/\x00")
}
