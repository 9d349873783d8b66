package consistency

import (
	"testing"
	"time"
)

// FuzzRules checks the promises of the modes on any timing: under
// window=D the agent's copy and the kernel's together never exceed D;
// nothing fetched before a forced poll is fresh under poll or callback;
// callback trusts nothing without its lease; strict trusts nothing and
// immutable everything fetched.
func FuzzRules(f *testing.F) {
	f.Add(int64(3e9), int64(0), int64(1e9), int64(0), int64(0), true)
	f.Add(int64(3e9), int64(2e9), int64(3e9), int64(5e9), int64(1e9), false)
	f.Add(int64(1e9), int64(-4e9), int64(2e9), int64(-1), int64(-2e9), true)
	f.Fuzz(func(t *testing.T, period, at, now, lastOK, void int64, recalls bool) {
		if period <= 0 || period > int64(24*time.Hour) {
			return
		}
		D := time.Duration(period)
		ts := func(ns int64) time.Time { return t0.Add(time.Duration(ns)) }
		fetched, when := ts(at), ts(now)
		if when.Before(fetched) {
			return
		}
		v := Vouch{LastOK: ts(lastOK), ValidSince: ts(void), Every: D, Recalls: recalls}
		age := when.Sub(fetched)

		w := Window{D: D}
		if w.Fresh(fetched, when, v) != (age < D) {
			t.Fatalf("window=%v, age %v: fresh %v", D, age, w.Fresh(fetched, when, v))
		}
		if k := w.KernelTimeout(fetched, when, v); k < 0 || age < D && age+k != D || age >= D && k != 0 {
			t.Fatalf("window=%v, age %v: the kernel may keep it %v more", D, age, k)
		}
		for _, r := range []Rule{Poll{Every: D}, Callback{Period: D}} {
			if fetched.Before(v.ValidSince) && r.Fresh(fetched, when, v) {
				t.Fatalf("%T: fresh though fetched before the last force", r)
			}
			if got := r.Validated(fetched, v); got.Before(fetched) {
				t.Fatalf("%T: validated %v, before it was fetched", r, got)
			}
		}
		if (Callback{}).Fresh(fetched, when, v) && !v.LeaseHeld(when) {
			t.Fatal("callback: fresh without its lease")
		}
		if (Strict{}).Fresh(fetched, when, v) || !(Immutable{}).Fresh(fetched, when, v) {
			t.Fatal("strict trusts, or immutable distrusts, what was fetched")
		}
	})
}
