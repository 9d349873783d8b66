package main

import (
	"fmt"
	"strings"
	"time"

	"pando.dev/pando/internal/client"
)

// controllerLine is pando stats' line about the controller: whether it
// answers, and what the agent holds to work without it.
func controllerLine(s client.ControllerStatus, now time.Time) string {
	var b strings.Builder
	switch s.State {
	case "up":
		fmt.Fprintf(&b, "controller up (at %s) since %s ago", s.Addr, ago(now, s.Since))
	case "down":
		fmt.Fprintf(&b, "controller DOWN since %s ago (last error %s ago: %s)", ago(now, s.Since), ago(now, s.LastErrorAt), s.LastError)
		if !s.NextAttempt.IsZero() && s.NextAttempt.After(now) {
			fmt.Fprintf(&b, ", tried again in %s", s.NextAttempt.Sub(now).Round(time.Second))
		}
	default:
		b.WriteString("controller not asked yet")
	}
	if s.MountTableAt.IsZero() {
		b.WriteString("; no mount table held")
	} else {
		fmt.Fprintf(&b, "; mount table read %s ago", ago(now, s.MountTableAt))
	}
	switch {
	case s.Tokens == 0:
		b.WriteString(", no tokens held")
	case s.TokenExpires.After(now):
		fmt.Fprintf(&b, ", %s held, the first expires in %s", tokens(s.Tokens), s.TokenExpires.Sub(now).Round(time.Second))
	default:
		fmt.Fprintf(&b, ", %s held, the first expired %s ago", tokens(s.Tokens), ago(now, s.TokenExpires))
	}
	if s.Errors > 0 {
		fmt.Fprintf(&b, "; %d requests to it failed", s.Errors)
	}
	return b.String()
}

func ago(now, t time.Time) string {
	d := now.Sub(t)
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func tokens(n int) string {
	if n == 1 {
		return "1 token"
	}
	return fmt.Sprintf("%d tokens", n)
}
