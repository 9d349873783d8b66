// Package doctor checks what pando needs on this machine and in the
// domain it is configured for: FUSE, fusermount3, the kernel's FUSE
// passthrough, the clock against the controller's, the certificate's
// expiry, the controller and every share, and the cache directory's free
// space. Each check gives one line: ok, or what is wrong and what to do.
package doctor

import (
	"context"
	"fmt"
	"io"
	"time"

	"pando.dev/pando/internal/config"
)

// Status is a check's outcome.
type Status int

const (
	OK   Status = iota
	Warn        // works, but not as well as it could
	Fail        // pando will not work until it is fixed
	Skip        // could not be checked because an earlier check failed
)

func (s Status) String() string {
	switch s {
	case OK:
		return "ok"
	case Warn:
		return "warn"
	case Fail:
		return "FAIL"
	}
	return "skip"
}

// Result is one check's outcome: Msg says what was found and, unless
// Status is OK, what to do.
type Result struct {
	Check  string
	Status Status
	Msg    string
}

// Options say what to check.
type Options struct {
	ConfigPath string        // "" for config.DefaultPath
	CacheDir   string        // the agent's cache directory
	Timeout    time.Duration // per network check (default 10s)
	// Now is the clock (default time.Now); tests may shift it.
	Now func() time.Time
}

// Thresholds.
const (
	// SkewWarn and SkewFail bound the clock's offset from the
	// controller's. Shares refuse tokens issued more than 5s in their
	// future (auth.clockSkew), so machines of a domain must agree within
	// that.
	SkewWarn = time.Second
	SkewFail = 5 * time.Second
	// CertWarn: a certificate that expires sooner gets a warning.
	CertWarn = 14 * 24 * time.Hour
	// FreeFail and FreeWarn bound the cache directory's free space.
	FreeFail = 256 << 20
	FreeWarn = 2 << 30
)

// Run runs every check, in order, and returns their results.
func Run(ctx context.Context, o Options) []Result {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	out := []Result{checkFUSE(), checkFusermount(), checkPassthrough(), checkCacheDir(o.CacheDir)}
	cfg, err := config.Load(o.ConfigPath)
	if err != nil {
		out = append(out, Result{"config", Fail, err.Error()})
		for _, c := range []string{"certificate", "controller", "clock", "shares"} {
			out = append(out, Result{c, Skip, "not checked: no usable configuration"})
		}
		return out
	}
	out = append(out, Result{"config", OK, fmt.Sprintf("%s@%s, controller %s", cfg.User, cfg.Domain, cfg.Controller)})
	out = append(out, checkCert(cfg, o.Now()))
	return append(out, checkDomain(ctx, cfg, o)...)
}

// Failed reports how many results failed.
func Failed(rs []Result) int {
	n := 0
	for _, r := range rs {
		if r.Status == Fail {
			n++
		}
	}
	return n
}

// Print writes one line per result.
func Print(w io.Writer, rs []Result) {
	for _, r := range rs {
		fmt.Fprintf(w, "%-4s  %-12s %s\n", r.Status, r.Check, r.Msg)
	}
}
