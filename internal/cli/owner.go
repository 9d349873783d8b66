package cli

import "pando.dev/pando/internal/wire"

// ownerOf and groupOf name who owns an entry for ls -l, as the share keeps
// it: a principal ("alice@uva"), a grid group, "#N" for a local id with no
// grid name, or "-" when the share keeps none (a file made at its host).
func ownerOf(a wire.Attr) string { return orDash(a.Owner) }
func groupOf(a wire.Attr) string { return orDash(a.Group) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
