// Package consistency decides how fresh what the agent caches of the
// namespace must be, path by path. A mount has a default mode and
// overrides by path prefix (For); each path gets one Rule, one type per
// mode (Strict, Window, Poll, Callback, Immutable), which answers every
// question the vfs and its edges ask about freshness:
//
//   - Fresh: may attributes or a listing fetched at t be used now without
//     asking the share?
//   - KernelTimeout, KernelListings, KernelOpenStat: how long may the
//     kernel keep an entry and its attributes, may it keep its own copy of
//     a listing, and the attributes of an open file?
//   - OnChange: what a change does (a create keeps the directory's
//     listing or drops it; the share recalls, and the kernel must forget
//     before the recall is acknowledged and when the lease runs out).
//   - Caches, Revalidates, PollEvery, ListsParent, FillsFromListing: what
//     is kept, whether it is ever asked for again, whether a poller of the
//     share vouches for it, and how a listing revalidates its entries.
//
// What a share's poller knows (when its last poll succeeded, what a forced
// poll voided) comes in as a Vouch: the package keeps no state and starts
// nothing; the vfs runs the pollers and asks. The protocols are specified
// in docs/consistency.md.
package consistency

import (
	"fmt"
	"strings"
	"time"
)

// Mode is a consistency mode.
type Mode int

// Consistency modes.
const (
	ModeWindow Mode = iota
	ModeStrict
	ModeImmutable
	ModePoll     // GVFS invalidation polling every Period
	ModeCallback // GVFS-style callbacks: the share recalls before a change completes
)

// Lease is how long the agent trusts its cache under callback after
// sending a poll that then succeeded; the share waits at most that long
// (plus a margin) for an agent that stopped answering.
const Lease = 3 * time.Second

// Kernel timeouts of the modes that let the kernel keep entries for long:
// immutable always, callback while the share's lease holds (the agent
// tells the kernel to forget what the share recalls).
const (
	ImmutableKernel = time.Hour
	CallbackKernel  = time.Hour
)

// Consistency is a mode and its period, as configured (Parse).
type Consistency struct {
	Mode   Mode
	Period time.Duration // window=D, poll=D; the lease under callback
}

// Default is window=3s.
var Default = Consistency{Mode: ModeWindow, Period: 3 * time.Second}

func (c Consistency) String() string {
	switch c.Mode {
	case ModeStrict:
		return "strict"
	case ModeImmutable:
		return "immutable"
	case ModePoll:
		return "poll=" + c.Period.String()
	case ModeCallback:
		return "callback"
	}
	return "window=" + c.Period.String()
}

// Parse parses "strict", "window=D", "poll=D", "callback" or "immutable".
func Parse(s string) (Consistency, error) {
	switch {
	case s == "strict":
		return Consistency{Mode: ModeStrict}, nil
	case s == "immutable":
		return Consistency{Mode: ModeImmutable}, nil
	case strings.HasPrefix(s, "window="):
		d, err := time.ParseDuration(strings.TrimPrefix(s, "window="))
		if err != nil || d < 0 {
			return Consistency{}, fmt.Errorf("consistency %q: the window must be a duration such as 3s", s)
		}
		return Consistency{Mode: ModeWindow, Period: d}, nil
	case strings.HasPrefix(s, "poll="):
		d, err := time.ParseDuration(strings.TrimPrefix(s, "poll="))
		if err != nil || d <= 0 {
			return Consistency{}, fmt.Errorf("consistency %q: the poll period must be a duration such as 30s", s)
		}
		return Consistency{Mode: ModePoll, Period: d}, nil
	case s == "callback":
		return Consistency{Mode: ModeCallback, Period: Lease}, nil
	}
	return Consistency{}, fmt.Errorf("unknown consistency %q; use strict, window=D (e.g. window=3s), poll=D (e.g. poll=30s), callback or immutable", s)
}

// Rule returns the rule of c's mode.
func (c Consistency) Rule() Rule {
	switch c.Mode {
	case ModeStrict:
		return Strict{}
	case ModeImmutable:
		return Immutable{}
	case ModePoll:
		return Poll{Every: c.Period}
	case ModeCallback:
		return Callback{Period: c.Period}
	}
	return Window{D: c.Period}
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
	c, err := Parse(mode)
	if err != nil {
		return Policy{}, err
	}
	return Policy{Prefix: strings.TrimSuffix(prefix, "/"), Consistency: c}, nil
}

// For returns the consistency that governs global path p: that of the
// longest policy prefix p is at or under, else def.
func For(def Consistency, pols []Policy, p string) Consistency {
	best := -1
	c := def
	for _, pol := range pols {
		if (p == pol.Prefix || strings.HasPrefix(p, pol.Prefix+"/")) && len(pol.Prefix) > best {
			best, c = len(pol.Prefix), pol.Consistency
		}
	}
	return c
}

// Any reports whether def or one of pols has mode m.
func Any(def Consistency, pols []Policy, m Mode) bool {
	if def.Mode == m {
		return true
	}
	for _, p := range pols {
		if p.Consistency.Mode == m {
			return true
		}
	}
	return false
}
