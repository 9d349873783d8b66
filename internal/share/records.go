package share

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Commit records live in slot files that are reused: writing a record
// costs a write into a free slot, dropping it a truncate to empty, with
// no file made or removed per commit (which cost as much again as the
// copy of a small file). Slots are kept in a directory of the share's
// state (Config.CommitDir), or, without one, in the share's root, where
// they are the share's own (see isStaging). An empty slot holds no record.
type recordStore struct {
	dir  string // "" : the share's root
	tree *tree
	mu   sync.Mutex
	free []*os.File
}

// open opens the slot name, creating it with create.
func (r *recordStore) open(name string, flags int) (*os.File, error) {
	if r.dir == "" {
		return r.tree.openFile(name, flags, 0o600)
	}
	return os.OpenFile(filepath.Join(r.dir, name), flags|os.O_CREATE, 0o600)
}

// names lists the slots.
func (r *recordStore) names() []string {
	var names []string
	if r.dir == "" {
		d, err := r.tree.openDir("")
		if err != nil {
			return nil
		}
		names, _ = d.Readdirnames(-1)
		d.Close()
	} else {
		ents, _ := os.ReadDir(r.dir)
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	out := names[:0]
	for _, n := range names {
		if strings.HasPrefix(n, journalPrefix) {
			out = append(out, n)
		}
	}
	return out
}

// remove removes the slot name.
func (r *recordStore) remove(name string) error {
	if r.dir == "" {
		return r.tree.remove(name, false)
	}
	return os.Remove(filepath.Join(r.dir, name))
}

// sync makes the slots' directory durable.
func (r *recordStore) syncDir() error {
	if r.dir == "" {
		return r.tree.dir.Sync()
	}
	d, err := os.Open(r.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// take returns a free slot, made if none is; fresh says it was made now
// (its directory entry needs a sync to be durable).
func (r *recordStore) take() (f *os.File, fresh bool, err error) {
	r.mu.Lock()
	if n := len(r.free); n > 0 {
		f = r.free[n-1]
		r.free = r.free[:n-1]
		r.mu.Unlock()
		return f, false, nil
	}
	r.mu.Unlock()
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	f, err = r.open(journalPrefix+hex.EncodeToString(rnd[:]), os.O_RDWR|os.O_CREATE|os.O_EXCL)
	return f, true, err
}

// give empties slot f and makes it free again (durably with sync).
func (r *recordStore) give(f *os.File, sync bool) error {
	err := f.Truncate(0)
	if err == nil && sync {
		err = f.Sync()
	}
	if err != nil {
		// A slot that may still hold its record is not reused; the
		// next start finds the record and completes a commit that is
		// complete: harmless.
		f.Close()
		return err
	}
	r.mu.Lock()
	r.free = append(r.free, f)
	r.mu.Unlock()
	return nil
}

// close closes the free slots and removes them (they are empty).
func (r *recordStore) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.free {
		name := filepath.Base(f.Name())
		f.Close()
		if err := r.remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			continue
		}
	}
	r.free = nil
}
