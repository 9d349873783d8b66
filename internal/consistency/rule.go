package consistency

import "time"

// Rule answers, for the paths of one mode, whether what is cached is
// fresh, how long the kernel may keep it and what a change does. There is
// one implementation per mode; Consistency.Rule picks it.
type Rule interface {
	// Fresh reports whether attributes or a listing fetched at at (zero:
	// never) may be used at now without asking the share; v is what the
	// share's poller vouches for (zero when none runs).
	Fresh(at, now time.Time, v Vouch) bool
	// KernelTimeout is how long the kernel may keep an entry and its
	// attributes, given when the agent's attributes of it were fetched
	// (at; zero when it holds none).
	KernelTimeout(at, now time.Time, v Vouch) time.Duration
	// Validated is when what was fetched at at was last known true: at,
	// or a later poll that named nothing of it.
	Validated(at time.Time, v Vouch) time.Time
	// Bound is how old an answer may be, if bounded (window, poll: the
	// period, as polls that fail fall back to the window rule; strict:
	// 0; immutable: unbounded; callback: 0, the share recalls first).
	Bound() (time.Duration, bool)

	// Caches reports whether anything of the path is kept to answer
	// from: attributes, listings, names a listing lacks, the kernel's
	// copy of a listing, copies served while the share is unreachable,
	// listings fetched ahead. Strict keeps nothing.
	Caches() bool
	// Revalidates reports whether what is cached is ever asked for
	// again. Immutable never is: what an earlier run persisted is used
	// as it is, and a read-only open does not ask the share.
	Revalidates() bool
	// PollEvery is how often a poller of the share asks it what changed
	// (under callback: Lease, which its long polls renew), 0 when no poller
	// vouches for the cache; when not 0, freshness depends on the polls
	// (Vouch).
	PollEvery() time.Duration
	// ListsParent reports whether an entry whose directory was never
	// listed is revalidated by listing the directory when it is small.
	// Under callback that listing would take a hold on a whole directory
	// nobody listed.
	ListsParent() bool
	// FillsFromListing reports whether a listing asks for the contents
	// of the small files in it, which stay good as long as their
	// attributes: under window they would be stale after D anyway.
	FillsFromListing() bool
	// KernelOpenStat reports whether the kernel may keep the attributes
	// of an open file for KernelTimeout (without, it asks before every
	// read of a page-cached file). Not under poll and callback, where the
	// kernel's copy could outlive an invalidation naming another path (a
	// rename).
	KernelOpenStat() bool

	// OnChange says what a change does.
	OnChange() Change
}

// Vouch is what a share's poller says of the agent's cache of it.
type Vouch struct {
	// Above: the path is above the shares (a domain's directory, made of
	// the mount table): no share holds it, no poller vouches for it.
	Above bool
	// LastOK is when the last poll that succeeded was sent (zero: none).
	LastOK time.Time
	// ValidSince voids what was fetched before it (the last forced poll).
	ValidSince time.Time
	// Every is the poller's period.
	Every time.Duration
	// Recalls: the poller holds a callback lease at the share, which
	// recalls before a change completes.
	Recalls bool
}

// LeaseHeld reports whether a callback share's lease holds at now: the
// last poll that succeeded was sent less than Lease ago.
func (v Vouch) LeaseHeld(now time.Time) bool {
	return v.Recalls && !v.LastOK.IsZero() && now.Sub(v.LastOK) < Lease
}

// Change is what a change of a path does under its mode.
type Change struct {
	// AddToListing: a create, mkdir or symlink through this agent adds
	// the name to its directory's cached listing, which keeps its age
	// (window and poll trust a listing for a time whatever happens
	// meanwhile); otherwise the listing is dropped.
	AddToListing bool
	// Recall: the share recalls what the agent holds before another's
	// change completes (callback). The agent then has the kernel forget
	// what is recalled before it acknowledges, and forget everything of
	// the share when the lease runs out; only then may the share grant
	// write delegations.
	Recall bool
}

// Strict caches nothing: every lookup, stat and open asks the share (the
// NFS noac baseline).
type Strict struct{}

// Window trusts what was fetched for D after it was fetched (the Avaki
// coherence window).
type Window struct{ D time.Duration }

// Poll trusts what was fetched while the share's poller hears from the
// share at least every two periods and names nothing of it; while polls
// fail, the window rule with the same period applies.
type Poll struct{ Every time.Duration }

// Callback trusts what was fetched while the share's lease holds (the
// share recalls before a change completes). Period is the kernel timeout
// of paths above the shares, which no share holds.
type Callback struct{ Period time.Duration }

// Immutable trusts what was fetched forever.
type Immutable struct{}

var (
	_ Rule = Strict{}
	_ Rule = Window{}
	_ Rule = Poll{}
	_ Rule = Callback{}
	_ Rule = Immutable{}
)

func (Strict) Fresh(at, now time.Time, v Vouch) bool { return false }

func (r Window) Fresh(at, now time.Time, v Vouch) bool {
	return !at.IsZero() && now.Sub(at) < r.D
}

func (r Poll) Fresh(at, now time.Time, v Vouch) bool {
	if v.LastOK.IsZero() || at.Before(v.ValidSince) {
		return false
	}
	if now.Sub(v.LastOK) <= 2*v.Every {
		return true
	}
	return now.Sub(at) < v.Every // polls failing: the window rule
}

func (Callback) Fresh(at, now time.Time, v Vouch) bool {
	return !v.LastOK.IsZero() && !at.Before(v.ValidSince) && v.LeaseHeld(now)
}

func (Immutable) Fresh(at, now time.Time, v Vouch) bool { return !at.IsZero() }

func (Strict) KernelTimeout(at, now time.Time, v Vouch) time.Duration { return 0 }

// KernelTimeout under window is what is left of the window of the
// attributes the agent holds: the kernel's copy must not make them older
// than D.
func (r Window) KernelTimeout(at, now time.Time, v Vouch) time.Duration {
	if at.IsZero() {
		return r.D
	}
	return max(r.D-now.Sub(at), 0)
}

// KernelTimeout under poll is the period: the kernel asks again every
// period and the agent answers from its cache unless a poll said the
// entry changed.
func (r Poll) KernelTimeout(at, now time.Time, v Vouch) time.Duration { return r.Every }

// KernelTimeout under callback is long while the share's lease holds (the
// agent has the kernel forget what is recalled), else nothing; a path
// above the shares is kept for the lease, as under window (a path walk
// would otherwise look it up again for every file).
func (r Callback) KernelTimeout(at, now time.Time, v Vouch) time.Duration {
	if v.Above {
		return r.Period
	}
	if !v.LeaseHeld(now) {
		return 0
	}
	return CallbackKernel
}

func (Immutable) KernelTimeout(at, now time.Time, v Vouch) time.Duration { return ImmutableKernel }

func (Strict) Validated(at time.Time, v Vouch) time.Time    { return at }
func (Window) Validated(at time.Time, v Vouch) time.Time    { return at }
func (Immutable) Validated(at time.Time, v Vouch) time.Time { return at }
func (Poll) Validated(at time.Time, v Vouch) time.Time      { return polledSince(at, v) }
func (Callback) Validated(at time.Time, v Vouch) time.Time  { return polledSince(at, v) }

// polledSince is at, or the last poll that succeeded after it if nothing
// voided it since.
func polledSince(at time.Time, v Vouch) time.Time {
	if !at.Before(v.ValidSince) && v.LastOK.After(at) {
		return v.LastOK
	}
	return at
}

func (Strict) Bound() (time.Duration, bool)    { return 0, true }
func (r Window) Bound() (time.Duration, bool)  { return r.D, true }
func (r Poll) Bound() (time.Duration, bool)    { return r.Every, true }
func (Callback) Bound() (time.Duration, bool)  { return 0, true }
func (Immutable) Bound() (time.Duration, bool) { return 0, false }

func (Strict) Caches() bool    { return false }
func (Window) Caches() bool    { return true }
func (Poll) Caches() bool      { return true }
func (Callback) Caches() bool  { return true }
func (Immutable) Caches() bool { return true }

func (Strict) Revalidates() bool    { return true }
func (Window) Revalidates() bool    { return true }
func (Poll) Revalidates() bool      { return true }
func (Callback) Revalidates() bool  { return true }
func (Immutable) Revalidates() bool { return false }

func (Strict) PollEvery() time.Duration    { return 0 }
func (Window) PollEvery() time.Duration    { return 0 }
func (r Poll) PollEvery() time.Duration    { return r.Every }
func (Callback) PollEvery() time.Duration  { return Lease }
func (Immutable) PollEvery() time.Duration { return 0 }

func (Strict) ListsParent() bool    { return false }
func (Window) ListsParent() bool    { return true }
func (Poll) ListsParent() bool      { return true }
func (Callback) ListsParent() bool  { return false }
func (Immutable) ListsParent() bool { return false }

func (Strict) FillsFromListing() bool    { return false }
func (Window) FillsFromListing() bool    { return false }
func (Poll) FillsFromListing() bool      { return true }
func (Callback) FillsFromListing() bool  { return true }
func (Immutable) FillsFromListing() bool { return false }

func (Strict) KernelOpenStat() bool    { return false }
func (Window) KernelOpenStat() bool    { return true }
func (Poll) KernelOpenStat() bool      { return false }
func (Callback) KernelOpenStat() bool  { return false }
func (Immutable) KernelOpenStat() bool { return true }

func (Strict) OnChange() Change    { return Change{} }
func (Window) OnChange() Change    { return Change{AddToListing: true} }
func (Poll) OnChange() Change      { return Change{AddToListing: true} }
func (Callback) OnChange() Change  { return Change{Recall: true} }
func (Immutable) OnChange() Change { return Change{} }
