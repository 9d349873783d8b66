package cli

import "pando.dev/pando/internal/wire"

// ownerOf and groupOf name who owns an entry, for ls -l ("-": unknown).
func ownerOf(a wire.Attr) string { return "-" }
func groupOf(a wire.Attr) string { return "-" }
