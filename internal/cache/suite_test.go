package cache

import (
	"testing"

	"pando.dev/pando/internal/blockcache"
	"pando.dev/pando/internal/blockcache/cachetest"
)

// TestSuite runs blockcache's conformance suite: what the vfs is promised
// of its cache, checked through the interface alone, in memory and on
// disk (no memory layer).
func TestSuite(t *testing.T) {
	for _, mem := range []int64{0, -1} {
		t.Run(map[int64]string{0: "memory", -1: "disk"}[mem], func(t *testing.T) {
			cachetest.Run(t, func(t *testing.T, dir string) blockcache.Cache {
				c, err := Open(Options{Dir: dir, BlockSize: 4096, DiskBytes: 1 << 20, MemoryBytes: mem})
				if err != nil {
					t.Fatal(err)
				}
				return c
			})
		})
	}
}
