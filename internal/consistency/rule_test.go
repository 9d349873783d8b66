package consistency

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// polled is what a poller vouches for: its last good poll at last, what
// was fetched before void unless after void.
func polled(last, void time.Time, every time.Duration, recalls bool) Vouch {
	return Vouch{LastOK: last, ValidSince: void, Every: every, Recalls: recalls}
}

func mustParse(t *testing.T, s string) Rule {
	t.Helper()
	c, err := Parse(s)
	if err != nil {
		t.Fatalf("Parse(%q): %v", s, err)
	}
	if c.String() != s {
		t.Fatalf("Parse(%q).String() = %q", s, c.String())
	}
	return c.Rule()
}

func TestStrict(t *testing.T) {
	r := mustParse(t, "strict")
	if r.Fresh(t0, t0, Vouch{}) {
		t.Error("strict trusts an answer fetched this instant")
	}
	if d := r.KernelTimeout(t0, t0, Vouch{}); d != 0 {
		t.Errorf("strict lets the kernel keep entries for %v", d)
	}
	if r.Caches() || r.ListsParent() || r.FillsFromListing() || r.KernelOpenStat() || r.PollEvery() != 0 {
		t.Error("strict keeps something, lists parents, fills from listings, lets the kernel keep an open file's attributes or polls")
	}
	if !r.Revalidates() {
		t.Error("strict never revalidates")
	}
	if c := r.OnChange(); c.AddToListing || c.Recall {
		t.Errorf("strict: a change does %+v; it keeps nothing to change", c)
	}
	if d, ok := r.Bound(); !ok || d != 0 {
		t.Errorf("strict bound %v %v, want 0", d, ok)
	}
}

func TestWindow(t *testing.T) {
	r := mustParse(t, "window=3s")
	for _, c := range []struct {
		age  time.Duration
		want bool
	}{{0, true}, {3*time.Second - 1, true}, {3 * time.Second, false}, {time.Hour, false}} {
		if got := r.Fresh(t0, t0.Add(c.age), Vouch{}); got != c.want {
			t.Errorf("window=3s, fetched %v ago: fresh %v, want %v", c.age, got, c.want)
		}
	}
	if r.Fresh(time.Time{}, t0, Vouch{}) {
		t.Error("window trusts what was never fetched")
	}
	// The kernel keeps what is left of the window, never more.
	for _, c := range []struct{ age, want time.Duration }{{0, 3 * time.Second}, {time.Second, 2 * time.Second}, {3 * time.Second, 0}, {time.Minute, 0}} {
		if got := r.KernelTimeout(t0, t0.Add(c.age), Vouch{}); got != c.want {
			t.Errorf("window=3s, attributes %v old: kernel timeout %v, want %v", c.age, got, c.want)
		}
	}
	if got := r.KernelTimeout(time.Time{}, t0, Vouch{}); got != 3*time.Second {
		t.Errorf("window=3s, no attributes held: kernel timeout %v, want the window", got)
	}
	if !r.Caches() || !r.Revalidates() || !r.ListsParent() || r.FillsFromListing() || !r.KernelOpenStat() || r.PollEvery() != 0 {
		t.Error("window: wrong answers about what it keeps")
	}
	if c := r.OnChange(); !c.AddToListing || c.Recall {
		t.Errorf("window: a change does %+v; a create adds to the listing, nothing is recalled", c)
	}
	if d, ok := r.Bound(); !ok || d != 3*time.Second {
		t.Errorf("window=3s bound %v %v", d, ok)
	}
	if got := r.Validated(t0, polled(t0.Add(time.Second), time.Time{}, time.Second, false)); !got.Equal(t0) {
		t.Errorf("window: validated %v, want when fetched (no poller vouches)", got)
	}
}

func TestPoll(t *testing.T) {
	r := mustParse(t, "poll=2s")
	if r.PollEvery() != 2*time.Second {
		t.Fatalf("poll=2s polls every %v", r.PollEvery())
	}
	fetched := t0
	for _, c := range []struct {
		name string
		now  time.Time
		v    Vouch
		want bool
	}{
		{"no poll answered yet", t0, Vouch{}, false},
		{"polled just now", t0.Add(time.Hour), polled(t0.Add(time.Hour), time.Time{}, 2*time.Second, false), true},
		{"last poll two periods ago", t0.Add(time.Hour), polled(t0.Add(time.Hour-4*time.Second), time.Time{}, 2*time.Second, false), true},
		{"polls failing, within the window", t0.Add(time.Second), polled(t0.Add(-5*time.Second), time.Time{}, 2*time.Second, false), true},
		{"polls failing, past the window", t0.Add(2 * time.Second), polled(t0.Add(-5*time.Second), time.Time{}, 2*time.Second, false), false},
		{"fetched before a forced poll", t0.Add(time.Second), polled(t0.Add(time.Second), t0.Add(time.Millisecond), 2*time.Second, false), false},
		{"above the shares", t0, Vouch{Above: true}, false},
	} {
		if got := r.Fresh(fetched, c.now, c.v); got != c.want {
			t.Errorf("poll, %s: fresh %v, want %v", c.name, got, c.want)
		}
	}
	if got := r.KernelTimeout(t0, t0.Add(time.Hour), Vouch{}); got != 2*time.Second {
		t.Errorf("poll=2s kernel timeout %v, want the period", got)
	}
	// A later poll that voided nothing validates what was fetched.
	if got := r.Validated(t0, polled(t0.Add(time.Minute), time.Time{}, 2*time.Second, false)); !got.Equal(t0.Add(time.Minute)) {
		t.Errorf("poll: validated %v, want the last poll", got)
	}
	if got := r.Validated(t0, polled(t0.Add(time.Minute), t0.Add(time.Second), 2*time.Second, false)); !got.Equal(t0) {
		t.Errorf("poll: validated %v after a force voided it, want when fetched", got)
	}
	if !r.Caches() || !r.Revalidates() || !r.ListsParent() || !r.FillsFromListing() || r.KernelOpenStat() {
		t.Error("poll: wrong answers about what it keeps")
	}
	if c := r.OnChange(); !c.AddToListing || c.Recall {
		t.Errorf("poll: a change does %+v", c)
	}
	if d, ok := r.Bound(); !ok || d != 2*time.Second {
		t.Errorf("poll=2s bound %v %v", d, ok)
	}
}

func TestCallback(t *testing.T) {
	r := mustParse(t, "callback")
	lease := func(last time.Time) Vouch { return polled(last, time.Time{}, Lease, true) }
	for _, c := range []struct {
		name string
		now  time.Time
		v    Vouch
		want bool
	}{
		{"lease renewed", t0.Add(time.Hour), lease(t0.Add(time.Hour - time.Second)), true},
		{"lease at its last instant", t0.Add(time.Hour), lease(t0.Add(time.Hour - Lease + 1)), true},
		{"lease ran out", t0.Add(time.Hour), lease(t0.Add(time.Hour - Lease)), false},
		{"no poll answered", t0, Vouch{Recalls: true}, false},
		{"poller without a lease", t0.Add(time.Second), polled(t0.Add(time.Second), time.Time{}, Lease, false), false},
		{"fetched before a forced poll", t0.Add(time.Second), polled(t0.Add(time.Second), t0.Add(1), Lease, true), false},
	} {
		if got := r.Fresh(t0, c.now, c.v); got != c.want {
			t.Errorf("callback, %s: fresh %v, want %v", c.name, got, c.want)
		}
	}
	if got := r.KernelTimeout(t0, t0.Add(time.Second), lease(t0)); got != CallbackKernel {
		t.Errorf("callback, lease held: kernel timeout %v, want %v", got, CallbackKernel)
	}
	if got := r.KernelTimeout(t0, t0.Add(Lease), lease(t0)); got != 0 {
		t.Errorf("callback, lease ran out: kernel timeout %v, want 0", got)
	}
	if got := r.KernelTimeout(time.Time{}, t0, Vouch{Above: true}); got != Lease {
		t.Errorf("callback, above the shares: kernel timeout %v, want the period %v", got, Lease)
	}
	if got := r.KernelTimeout(time.Time{}, t0, Vouch{}); got != 0 {
		t.Errorf("callback, not located: kernel timeout %v, want 0", got)
	}
	if !r.Caches() || !r.Revalidates() || r.ListsParent() || !r.FillsFromListing() || r.KernelOpenStat() || r.PollEvery() != Lease {
		t.Error("callback: wrong answers about what it keeps")
	}
	if c := r.OnChange(); c.AddToListing || !c.Recall {
		t.Errorf("callback: a change does %+v; the share recalls, a create drops the listing", c)
	}
}

func TestImmutable(t *testing.T) {
	r := mustParse(t, "immutable")
	if !r.Fresh(t0, t0.Add(10000*time.Hour), Vouch{}) {
		t.Error("immutable distrusts an old answer")
	}
	if r.Fresh(time.Time{}, t0, Vouch{}) {
		t.Error("immutable trusts what was never fetched")
	}
	if got := r.KernelTimeout(t0, t0.Add(24*time.Hour), Vouch{}); got != ImmutableKernel {
		t.Errorf("immutable kernel timeout %v", got)
	}
	if !r.Caches() || r.Revalidates() || r.ListsParent() || r.FillsFromListing() || !r.KernelOpenStat() || r.PollEvery() != 0 {
		t.Error("immutable: wrong answers about what it keeps")
	}
	if _, ok := r.Bound(); ok {
		t.Error("immutable has a bound")
	}
	if c := r.OnChange(); c.AddToListing || c.Recall {
		t.Errorf("immutable: a change does %+v", c)
	}
}

// TestPolicies: the longest prefix a path is at or under chooses its
// mode, else the default; a prefix never matches a sibling that shares
// its first letters.
func TestPolicies(t *testing.T) {
	var pols []Policy
	for _, s := range []string{"/uva/releases=immutable", "/uva/releases/nightly/=poll=30s", "/uva/scratch=strict", "/cern=callback"} {
		p, err := ParsePolicy(s)
		if err != nil {
			t.Fatalf("ParsePolicy(%q): %v", s, err)
		}
		pols = append(pols, p)
	}
	for p, want := range map[string]string{
		"/uva/releases":               "immutable",
		"/uva/releases/v1/bin/tool":   "immutable",
		"/uva/releases/nightly":       "poll=30s",
		"/uva/releases/nightly/today": "poll=30s",
		"/uva/releases2":              "window=3s",
		"/uva/scratch/x":              "strict",
		"/cern/atlas":                 "callback",
		"/uva":                        "window=3s",
		"/":                           "window=3s",
	} {
		if got := For(Default, pols, p).String(); got != want {
			t.Errorf("For(%q) = %s, want %s", p, got, want)
		}
	}
	if _, ok := For(Default, pols, "/uva/releases/x").Rule().(Immutable); !ok {
		t.Error("an immutable prefix does not choose the Immutable rule")
	}
	if !Any(Default, pols, ModeCallback) || Any(Default, pols[:3], ModeCallback) {
		t.Error("Any: wrong about callback")
	}
	for _, bad := range []string{"releases=immutable", "/uva", "/uva=sometimes", "/uva=window=soon", "/uva=poll=0s"} {
		if _, err := ParsePolicy(bad); err == nil {
			t.Errorf("ParsePolicy(%q) accepted", bad)
		}
	}
	if _, err := Parse("window=-1s"); err == nil || !strings.Contains(err.Error(), "duration") {
		t.Errorf("Parse of a negative window: %v", err)
	}
}
