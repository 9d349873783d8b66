package mount

import (
	"strings"
	"sync"
	"testing"
)

// HoldReleases holds back every Release the mounts of this process get
// until let is called (or the test ends): the kernel sends RELEASE after
// close(2) has returned, and an agent may hear of it after the next open.
func HoldReleases(t testing.TB) (let func()) {
	ch := make(chan struct{})
	hold := func() { <-ch }
	releaseHook.Store(&hold)
	var once sync.Once
	let = func() {
		once.Do(func() {
			releaseHook.Store(nil)
			close(ch)
		})
	}
	t.Cleanup(let)
	return let
}

// Children counts the inodes the mount holds of the entries of the
// directory at global path p (0 if it holds none of the directory).
func Children(m *Mount, p string) int {
	n := m.root.EmbeddedInode()
	for _, name := range strings.Split(strings.Trim(p, "/"), "/") {
		if n = n.GetChild(name); n == nil {
			return 0
		}
	}
	return len(n.Children())
}
