// Package memory is an implementation of remote.Namespace and remote.Data
// that holds its shares in memory: the vfs's tests use it where a real
// domain (internal/testenv) would only make them slower, and it passes
// the contract suite of remote/remotetest as internal/client does.
//
// What it does not do, by design: grant write delegations (File.Deleg is
// false, so DelegReturn and DelegFail have nothing to act on), keep
// listing sums (Validate reports every listing changed, always a safe
// answer), check rights (everyone may do everything), or lose a share
// unless told to (SetDown).
package memory

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/wire"
)

var (
	_ remote.Namespace = (*Tree)(nil)
	_ remote.Data      = (*Tree)(nil)
)

// Tree is a namespace and a data path over shares held in memory. It is
// safe for concurrent use.
type Tree struct {
	principal string
	mounts    []wire.MountEntry

	mu      sync.Mutex
	shares  map[string]*share
	clock   uint64        // the last version and invalidation stamp given
	changed chan struct{} // closed and replaced at each change
	down    map[string]error
	hook    func(remote.HealthEvent)
	handles uint64 // handle ids given
}

type share struct {
	nodes  map[string]*node // by share-relative path; "" is the root
	ino    uint64           // the last inode number given
	log    []inval
	stages map[stageKey]*stageData
}

type inval struct {
	stamp uint64
	path  string
}

type node struct {
	attr   wire.Attr
	data   []byte
	target string // a symlink's
	xattr  map[string][]byte
	locks  []lock
}

type lock struct {
	handle      uint64
	typ         uint8
	start, size int64 // size 0: to the end
}

// New makes a tree whose shares are those the mounts name, each an empty
// directory, acting as principal.
func New(principal string, mounts ...wire.MountEntry) *Tree {
	t := &Tree{principal: principal, mounts: slices.Clone(mounts), shares: make(map[string]*share),
		changed: make(chan struct{}), down: make(map[string]error)}
	for _, m := range mounts {
		if t.shares[m.Share] != nil {
			continue
		}
		sh := &share{nodes: make(map[string]*node), stages: make(map[stageKey]*stageData)}
		sh.nodes[""] = t.newNode(sh, syscall.S_IFDIR|0o755)
		t.shares[m.Share] = sh
		for dir := m.SharePath; dir != "" && dir != "."; dir = path.Dir(dir) {
			sh.nodes[strings.Trim(dir, "/")] = t.newNode(sh, syscall.S_IFDIR|0o755)
		}
	}
	return t
}

// SetDown marks share down with err (nil: up again): every request to it
// fails with an error matching remote.ErrUnreachable, and the health hook
// hears of it.
func (t *Tree) SetDown(share string, err error) {
	t.mu.Lock()
	was := t.down[share]
	if err != nil {
		t.down[share] = fmt.Errorf("share %s: %w: %w", share, remote.ErrUnreachable, err)
	} else {
		delete(t.down, share)
	}
	hook := t.hook
	t.mu.Unlock()
	if hook != nil && (was == nil) != (err == nil) {
		hook(remote.HealthEvent{Share: share, Up: err == nil, Since: time.Now(), Err: err})
	}
}

// newNode makes a node of mode with a fresh inode and version. t.mu is
// held (or t is not shared yet).
func (t *Tree) newNode(sh *share, mode uint32) *node {
	sh.ino++
	t.clock++
	now := time.Now().UnixNano()
	n := &node{attr: wire.Attr{Ino: sh.ino, Mode: mode, Nlink: 1, Atime: now, Mtime: now, Ctime: now, Version: t.clock}}
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		n.attr.Nlink = 2
	}
	return n
}

// touch gives n a new version and records the change of rel (and of its
// directory's listing). t.mu is held.
func (t *Tree) touch(sh *share, n *node, rel string, data bool) {
	t.clock++
	now := time.Now().UnixNano()
	n.attr.Version, n.attr.Ctime = t.clock, now
	if data {
		n.attr.Mtime = now
	}
	n.attr.Size = int64(len(n.data))
	if n.target != "" {
		n.attr.Size = int64(len(n.target))
	}
	n.attr.Blocks = (n.attr.Size + 511) / 512
	sh.log = append(sh.log, inval{stamp: t.clock, path: rel})
	close(t.changed)
	t.changed = make(chan struct{})
}

// where resolves gpath to its share, for a request: t.mu is held on
// return without error.
func (t *Tree) where(gpath string) (remote.Loc, *share, error) {
	g := path.Clean("/" + strings.TrimPrefix(gpath, "/"))
	loc := remote.Resolve(t.mounts, g)
	t.mu.Lock()
	if loc.Share == "" {
		return loc, nil, nil
	}
	if err := t.down[loc.Share]; err != nil {
		t.mu.Unlock()
		return loc, nil, err
	}
	return loc, t.shares[loc.Share], nil
}

func notExist(loc remote.Loc) error {
	return wire.Errorf(wire.CodeNotExist, "%s: no such file or directory", loc.Global)
}

// lookup returns the node at loc, t.mu held.
func (sh *share) lookup(loc remote.Loc) (*node, error) {
	n := sh.nodes[loc.Rel]
	if n == nil {
		return nil, notExist(loc)
	}
	return n, nil
}

// parentOf checks that the directory above loc exists, t.mu held.
func (sh *share) parentOf(loc remote.Loc) (*node, error) {
	if loc.Rel == "" {
		return nil, wire.Errorf(wire.CodeExist, "%s: the root of a share", loc.Global)
	}
	d := sh.nodes[parentRel(loc.Rel)]
	switch {
	case d == nil:
		return nil, notExist(loc)
	case d.attr.Mode&syscall.S_IFMT != syscall.S_IFDIR:
		return nil, wire.Errorf(wire.CodeNotDir, "%s: a parent is not a directory", loc.Global)
	}
	return d, nil
}

func parentRel(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	return ""
}

// children returns the names directly in rel, sorted, t.mu held.
func (sh *share) children(rel string) []string {
	var names []string
	for p := range sh.nodes {
		if p != "" && p != rel && parentRel(p) == rel {
			names = append(names, path.Base(p))
		}
	}
	slices.Sort(names)
	return names
}

func join(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

// synthDir is the attributes of a directory above every mount.
var synthDir = wire.Attr{Mode: syscall.S_IFDIR | 0o555, Nlink: 2}

// above lists the names directly below g, a directory above the mounts,
// or fails when no mount lies below it.
func (t *Tree) above(loc remote.Loc) ([]string, error) {
	var names []string
	for _, m := range t.mounts {
		if m.Prefix != loc.Global && remote.Under(m.Prefix, loc.Global) {
			rest := strings.TrimPrefix(strings.TrimPrefix(m.Prefix, loc.Global), "/")
			if n := strings.SplitN(rest, "/", 2)[0]; !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 {
		return nil, notExist(loc)
	}
	slices.Sort(names)
	return names, nil
}

// Principal is the principal New was given.
func (t *Tree) Principal() string { return t.principal }

// MountTable returns the mounts New was given.
func (t *Tree) MountTable(context.Context) ([]wire.MountEntry, error) {
	return slices.Clone(t.mounts), nil
}

// Locate resolves gpath against the mounts.
func (t *Tree) Locate(_ context.Context, gpath string) (remote.Loc, error) {
	return remote.Resolve(t.mounts, path.Clean("/"+strings.TrimPrefix(gpath, "/"))), nil
}
