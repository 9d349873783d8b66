package vfs

import (
	"context"
	"log/slog"
	"syscall"
)

// Replay sends the data that earlier closes could not send (the share was
// unreachable, or the agent stopped first). A file whose version at the
// share is still the one the data was written against gets it; a file
// that changed meanwhile is left alone and reported, its data kept in the
// cache (`pando cache ls` shows it dirty): nothing is dropped silently.
func (v *FS) Replay(ctx context.Context, log *slog.Logger) (sent, conflicts int) {
	for _, e := range v.cache.DirtyKeys() {
		if e.Name == "" {
			continue
		}
		a, err := v.c.Stat(ctx, e.Name)
		if err != nil {
			log.Warn("unsent data for a file that cannot be found; kept in the cache", "path", e.Name, "err", err)
			conflicts++
			continue
		}
		key, err := v.Key(ctx, e.Name, a)
		if err != nil || key != e.Key || a.Version != e.Version {
			log.Warn("unsent data for a file that changed at its share meanwhile; kept in the cache, not written over the newer version",
				"path", e.Name)
			conflicts++
			continue
		}
		h, err := v.Open(ctx, e.Name, syscall.O_RDWR)
		if err != nil {
			log.Warn("cannot reopen a file with unsent data", "path", e.Name, "err", err)
			conflicts++
			continue
		}
		if err := h.Release(ctx); err != nil {
			log.Warn("cannot send data left from before", "path", e.Name, "err", err)
			conflicts++
			continue
		}
		sent++
	}
	return sent, conflicts
}
