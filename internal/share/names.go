package share

import (
	"os"
	"slices"
	"sync"

	"pando.dev/pando/internal/wire"
)

// dirNames keeps the sorted names of the large directories being listed
// page by page, so that each page of a listing of N names costs the page's
// entries and not a new read of all N. An entry is used only while the
// directory's version (its ctime, moved on by every name added or
// removed) is the one it was read at: a page after a change reads the
// directory again and goes on after the last name given, so the listing
// neither repeats a name nor misses one that was there throughout.
type dirNames struct {
	mu   sync.Mutex
	dirs map[string]namesEntry
	tick uint64
}

type namesEntry struct {
	ino, version uint64
	names        []string
	used         uint64
}

// dirNamesKept is how many directories' names are kept at once.
const dirNamesKept = 8

// get returns the sorted names of directory d (rel, attributes a).
func (c *dirNames) get(rel string, a wire.Attr, d *os.File) ([]string, error) {
	c.mu.Lock()
	c.tick++
	if e, ok := c.dirs[rel]; ok && e.ino == a.Ino && e.version == a.Version {
		e.used = c.tick
		c.dirs[rel] = e
		c.mu.Unlock()
		return e.names, nil
	}
	c.mu.Unlock()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	if len(names) <= wire.ReadDirPage {
		return names, nil // one page: nothing to keep
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dirs == nil {
		c.dirs = make(map[string]namesEntry)
	}
	if _, ok := c.dirs[rel]; !ok && len(c.dirs) >= dirNamesKept {
		var oldest string
		var at uint64
		for k, e := range c.dirs {
			if oldest == "" || e.used < at {
				oldest, at = k, e.used
			}
		}
		delete(c.dirs, oldest)
	}
	c.dirs[rel] = namesEntry{ino: a.Ino, version: a.Version, names: names, used: c.tick}
	return names, nil
}
