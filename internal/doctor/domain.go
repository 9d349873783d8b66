package doctor

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/relay"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// checkCert: the configuration's certificate is valid now and for a
// while yet.
func checkCert(cfg *config.Config, now time.Time) Result {
	block, _ := pem.Decode([]byte(cfg.Cert))
	if block == nil {
		return Result{"certificate", Fail, "the configuration's certificate is not PEM: ask your administrator for a new bundle (pando user add)"}
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return Result{"certificate", Fail, fmt.Sprintf("the configuration's certificate does not parse (%v): ask your administrator for a new bundle (pando user add)", err)}
	}
	day := func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }
	switch left := cert.NotAfter.Sub(now); {
	case now.Before(cert.NotBefore):
		return Result{"certificate", Fail, fmt.Sprintf("the certificate is valid only from %s: this machine's clock is behind; set it (timedatectl set-ntp true)", day(cert.NotBefore))}
	case left <= 0:
		return Result{"certificate", Fail, fmt.Sprintf("the certificate expired on %s: ask your administrator for a new bundle (pando user add)", day(cert.NotAfter))}
	case left < CertWarn:
		return Result{"certificate", Warn, fmt.Sprintf("the certificate expires on %s, in %d days: ask your administrator for a new bundle (pando user add) before then", day(cert.NotAfter), int(left.Hours()/24))}
	}
	return Result{"certificate", OK, fmt.Sprintf("%s, valid until %s", cert.Subject.CommonName, day(cert.NotAfter))}
}

// checkDomain: the controller answers (and its clock agrees with this
// machine's), and so does every share.
func checkDomain(ctx context.Context, cfg *config.Config, o Options) []Result {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return []Result{{"controller", Fail, fmt.Sprintf("cannot use the configuration's credentials (%v): ask your administrator for a new bundle (pando user add)", err)},
			{"clock", Skip, "not checked: no controller"}, {"shares", Skip, "not checked: no controller"}}
	}
	defer c.Close()
	addrs := strings.Join(cfg.ControllerAddrs(), ", ")

	cctx, cancel := context.WithTimeout(ctx, o.Timeout)
	sent := o.Now()
	who, err := c.Admin().WhoAmI(cctx)
	got := o.Now()
	cancel()
	if err != nil {
		return []Result{{"controller", Fail, fmt.Sprintf("no answer from %s (%v): check that the controller runs (pando controller or pando up) and that this machine can reach it", addrs, err)},
			{"clock", Skip, "not checked: no controller"}, {"shares", Skip, "not checked: no controller"}}
	}
	rtt := got.Sub(sent)
	out := []Result{{"controller", OK, fmt.Sprintf("%s answers: you are %s (%s round trip)", addrs, who.Principal, rtt.Round(time.Microsecond))}}
	out = append(out, clockResult(who.Now, sent, rtt))
	return append(out, checkShares(ctx, c, o)...)
}

// clockResult compares the controller's clock, read at some point of the
// round trip that began at sent, with the middle of that round trip; the
// uncertainty is half the round trip.
func clockResult(ctrlNow int64, sent time.Time, rtt time.Duration) Result {
	if ctrlNow == 0 {
		return Result{"clock", Warn, "the controller does not report its time (an older version): cannot check the skew; keep clocks in sync with NTP"}
	}
	mid := sent.Add(rtt / 2)
	skew := mid.Sub(time.Unix(0, ctrlNow))
	abs := skew.Abs()
	if abs > rtt/2 {
		abs -= rtt / 2 // the part the round trip cannot explain
	} else {
		abs = 0
	}
	dir := "ahead of"
	if skew < 0 {
		dir = "behind"
	}
	what := fmt.Sprintf("this machine's clock is %s %s the controller's", skew.Abs().Round(time.Millisecond), dir)
	switch {
	case abs > SkewFail:
		return Result{"clock", Fail, what + fmt.Sprintf(": shares refuse tokens more than %s off; sync the clocks with NTP (timedatectl set-ntp true, or chronyd)", SkewFail)}
	case abs > SkewWarn:
		return Result{"clock", Warn, what + fmt.Sprintf(": close to the %s shares tolerate; sync the clocks with NTP (timedatectl set-ntp true, or chronyd)", SkewFail)}
	}
	return Result{"clock", OK, what}
}

// checkShares: every share registered with the controller is online and
// answers at its addresses, and a path it serves can be read from here.
func checkShares(ctx context.Context, c *client.Client, o Options) []Result {
	sctx, cancel := context.WithTimeout(ctx, o.Timeout)
	shares, err := c.Admin().ShareList(sctx)
	cancel()
	if err != nil {
		return []Result{{"shares", Fail, fmt.Sprintf("the controller did not list its shares (%v): check the controller's log", err)}}
	}
	mctx, cancel := context.WithTimeout(ctx, o.Timeout)
	mounts, err := c.MountTable(mctx)
	cancel()
	if err != nil {
		return []Result{{"shares", Fail, fmt.Sprintf("the controller did not give its mount table (%v): check the controller's log", err)}}
	}
	if len(shares) == 0 {
		return []Result{{"shares", Warn, "the domain has no share yet: export a directory (pando share --root DIR --name NAME) and mount it (pando ns mount /DOMAIN/NAME NAME)"}}
	}
	slices.SortFunc(shares, func(a, b wire.ShareInfo) int { return strings.Compare(a.Name, b.Name) })
	var out []Result
	for _, s := range shares {
		out = append(out, checkShare(ctx, c, s, mounts, o))
	}
	return out
}

func checkShare(ctx context.Context, c *client.Client, s wire.ShareInfo, mounts []wire.MountEntry, o Options) Result {
	name := "share " + s.Name
	start := fmt.Sprintf("start it again (pando share --name %s ...)", s.Name)
	if !s.Online {
		seen := "never"
		if s.LastSeen != 0 {
			seen = time.Unix(0, s.LastSeen).UTC().Format("2006-01-02 15:04:05 UTC")
		}
		return Result{name, Fail, fmt.Sprintf("share %s is offline (the controller last heard from it %s): %s", s.Name, seen, start)}
	}
	if len(s.Addrs) == 0 {
		return Result{name, Fail, fmt.Sprintf("share %s registered no address: %s", s.Name, start)}
	}
	// A TCP dial of each address: a share that answers none is down, or
	// a firewall is in the way.
	var dialErrs []string
	answered := ""
	for _, a := range s.Addrs {
		dctx, cancel := context.WithTimeout(ctx, o.Timeout)
		var conn net.Conn
		var err error
		if relay.IsAddr(a) {
			conn, err = relay.Dial(dctx, a) // through the relay, and the share's dial back
		} else {
			conn, err = (&net.Dialer{}).DialContext(dctx, "tcp", a)
		}
		cancel()
		if err == nil {
			conn.Close()
			answered = a
			break
		}
		dialErrs = append(dialErrs, err.Error())
	}
	if answered == "" {
		return Result{name, Fail, fmt.Sprintf("share %s does not answer at %s (%s): %s, or open its port to this machine",
			s.Name, strings.Join(s.Addrs, ", "), strings.Join(dialErrs, "; "), start)}
	}
	// Then a request through the client, to a path the share serves:
	// TLS, the token, the protocol.
	prefix, replicaOf := "", ""
	for _, m := range mounts {
		if m.Share == s.Name {
			prefix = m.Prefix
			break
		}
		for _, l := range m.More {
			if l.Share == s.Name && replicaOf == "" {
				replicaOf = m.Prefix
			}
		}
	}
	if prefix == "" && replicaOf != "" {
		return Result{name, OK, fmt.Sprintf("answers at %s; holds a replica of %s (replicas are listed, not yet read from)", answered, replicaOf)}
	}
	if prefix == "" {
		return Result{name, Warn, fmt.Sprintf("share %s answers at %s but no path is mounted from it: mount it (pando ns mount /DOMAIN/%s %s)", s.Name, answered, s.Name, s.Name)}
	}
	sctx, cancel := context.WithTimeout(ctx, o.Timeout)
	_, err := c.Stat(sctx, prefix)
	cancel()
	switch {
	case err == nil:
		return Result{name, OK, fmt.Sprintf("serves %s at %s", prefix, answered)}
	case errors.Is(err, client.ErrUnreachable), errors.Is(err, rpc.ErrBroken), errors.Is(err, context.DeadlineExceeded):
		return Result{name, Fail, fmt.Sprintf("share %s takes connections at %s but does not serve %s (%v): check its log, or %s", s.Name, answered, prefix, err, start)}
	}
	// It answered, with a refusal of this user (no right to the mount
	// point, say): reachable.
	return Result{name, OK, fmt.Sprintf("answers at %s (%s: %v)", answered, prefix, err)}
}
