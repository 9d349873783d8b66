package vfs

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Mode is a consistency mode.
type Mode int

// Consistency modes.
const (
	Window Mode = iota
	Strict
	Immutable
	Poll     // GVFS invalidation polling every Period
	Callback // GVFS-style callbacks: the share recalls before a change completes
)

// Callback timing: an idle long poll returns after callbackWait (a
// heartbeat); the agent trusts its cache for callbackLease after sending a
// poll that then succeeded, and the share waits at most that long (plus a
// margin) for an agent that stopped answering.
const (
	callbackWait  = time.Second
	callbackLease = 3 * time.Second
)

// Consistency is a mode and its period.
type Consistency struct {
	Mode   Mode
	Period time.Duration // for Window
}

// DefaultConsistency is window=3s.
var DefaultConsistency = Consistency{Mode: Window, Period: 3 * time.Second}

func (c Consistency) String() string {
	switch c.Mode {
	case Strict:
		return "strict"
	case Immutable:
		return "immutable"
	case Poll:
		return "poll=" + c.Period.String()
	case Callback:
		return "callback"
	}
	return "window=" + c.Period.String()
}

// ParseConsistency parses "strict", "immutable" or "window=D".
func ParseConsistency(s string) (Consistency, error) {
	switch {
	case s == "strict":
		return Consistency{Mode: Strict}, nil
	case s == "immutable":
		return Consistency{Mode: Immutable}, nil
	case strings.HasPrefix(s, "window="):
		d, err := time.ParseDuration(strings.TrimPrefix(s, "window="))
		if err != nil || d < 0 {
			return Consistency{}, fmt.Errorf("consistency %q: the window must be a duration such as 3s", s)
		}
		return Consistency{Mode: Window, Period: d}, nil
	case strings.HasPrefix(s, "poll="):
		d, err := time.ParseDuration(strings.TrimPrefix(s, "poll="))
		if err != nil || d <= 0 {
			return Consistency{}, fmt.Errorf("consistency %q: the poll period must be a duration such as 30s", s)
		}
		return Consistency{Mode: Poll, Period: d}, nil
	case s == "callback":
		return Consistency{Mode: Callback, Period: callbackLease}, nil
	}
	return Consistency{}, fmt.Errorf("unknown consistency %q; use strict, window=D (e.g. window=3s), poll=D (e.g. poll=30s), callback or immutable", s)
}

// WriteMode says when written data reaches the share.
type WriteMode int

// Write modes.
const (
	WriteClose   WriteMode = iota // on the last close
	WriteThrough                  // before each write returns
	// WriteBack keeps writes in the cache while the share has granted a
	// write delegation (callback only); close mode otherwise.
	WriteBack
)

func (w WriteMode) String() string {
	switch w {
	case WriteThrough:
		return "through"
	case WriteBack:
		return "back"
	}
	return "close"
}

// ParseWriteMode parses "close", "through" or "back".
func ParseWriteMode(s string) (WriteMode, error) {
	switch s {
	case "close":
		return WriteClose, nil
	case "through":
		return WriteThrough, nil
	case "back":
		return WriteBack, nil
	}
	return 0, fmt.Errorf("unknown write mode %q; use close, through or back", s)
}

// Check reports options that do not fit together.
func (o *Options) Check() error {
	if o.Write != WriteBack {
		return nil
	}
	if o.Consistency.Mode == Callback {
		return nil
	}
	for _, p := range o.Policies {
		if p.Consistency.Mode == Callback {
			return nil
		}
	}
	return fmt.Errorf("write mode back needs write delegations, which only the callback consistency mode has; add --consistency callback (or a --policy PREFIX=callback), or use --write close")
}

// Policy applies a consistency mode to a path prefix.
type Policy struct {
	Prefix      string
	Consistency Consistency
}

// ParsePolicy parses "PREFIX=MODE", e.g. "/uva/releases=immutable".
func ParsePolicy(s string) (Policy, error) {
	prefix, mode, ok := strings.Cut(s, "=")
	if !ok || !strings.HasPrefix(prefix, "/") {
		return Policy{}, fmt.Errorf("policy %q must look like /domain/prefix=MODE", s)
	}
	c, err := ParseConsistency(mode)
	if err != nil {
		return Policy{}, err
	}
	return Policy{Prefix: strings.TrimSuffix(prefix, "/"), Consistency: c}, nil
}

// Options configure a file system.
type Options struct {
	Consistency Consistency
	Policies    []Policy
	Write       WriteMode
	// ReadAhead is how many blocks to keep in flight ahead of a sequential
	// reader (default 16: 16 MiB, the bandwidth-delay product of 1 Gbit/s
	// at 128 ms). On a path whose measured bandwidth-delay product asks
	// for more, read-ahead keeps up to ReadAheadMax blocks in flight
	// (default: 64 MiB of blocks when ReadAhead is left at its default,
	// else ReadAhead: a depth that was asked for is kept).
	ReadAhead    int
	ReadAheadMax int
	Log          *slog.Logger
	// Offline says what is done with cached data while its share cannot
	// be reached (see offline.go).
	Offline Offline
	// MaxUnsent bounds the data not yet sent that the cache accepts while
	// a share cannot be reached (writes kept back under a write
	// delegation): past it, writes fail with EHOSTUNREACH. 0: half the
	// cache's dirty limit (cache.DirtyLimit), which also caps it.
	MaxUnsent int64
	// MetaEntries bounds the metadata kept in memory: attributes (one
	// each) and listings (one plus one per entry), each kind up to this
	// many, the least recently used dropped first. 0: DefaultMetaEntries.
	MetaEntries int
}

// DefaultMetaEntries is the default bound of Options.MetaEntries: the
// metadata of a tree of 200,000 files, at most about 120 MiB (an attribute
// kept costs about 250 bytes, twice: fresh and last known, see offline.go;
// a listing's entry about 110).
const DefaultMetaEntries = 200_000

// policy returns the consistency for a global path: the longest matching
// policy prefix, else the default.
func (o *Options) policy(p string) Consistency {
	best := -1
	c := o.Consistency
	for _, pol := range o.Policies {
		if (p == pol.Prefix || strings.HasPrefix(p, pol.Prefix+"/")) && len(pol.Prefix) > best {
			best, c = len(pol.Prefix), pol.Consistency
		}
	}
	return c
}

// fresh reports whether something fetched at t is still good under c.
func (c Consistency) fresh(t, now time.Time) bool {
	switch c.Mode {
	case Immutable:
		return !t.IsZero()
	case Strict:
		return false
	}
	return !t.IsZero() && now.Sub(t) < c.Period
}

// KernelTimeout is how long the kernel may cache entries and attributes.
// Under poll, the kernel asks again every period and the agent answers
// from its cache unless a poll said the entry changed. Under callback it
// depends on the share's lease (FS.KernelTimeout, kernel.go): nothing
// here.
func (c Consistency) KernelTimeout() time.Duration {
	switch c.Mode {
	case Immutable:
		return time.Hour
	case Strict, Callback:
		return 0
	}
	return c.Period
}
