package web

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDAVBodyBounds: an XML body past 1 MiB is refused unread.
func TestDAVBodyBounds(t *testing.T) {
	for _, c := range []struct {
		body string
		want int
	}{
		{strings.Repeat(" ", maxDAVBody+1), 413},
		{`<a xmlns:x=""/>`, 400},
		{`<a><b></a>`, 400},
		{`<?xml version="1.0"?><D:propfind xmlns:D="DAV:"><D:allprop/></D:propfind>`, 0},
	} {
		r := httptest.NewRequest("PROPFIND", "/d/data/", strings.NewReader(c.body))
		r.Header.Set("Depth", "1")
		if code, msg := checkDAVBody(r); code != c.want {
			t.Errorf("%.40q: %d %s, want %d", c.body, code, msg, c.want)
		}
	}
}

// TestPropfindInfinity: a PROPFIND of unbounded depth (or with no Depth,
// which means the same) is refused before it walks anything.
func TestPropfindInfinity(t *testing.T) {
	for _, d := range []string{"infinity", "", "Infinity", "2"} {
		r := httptest.NewRequest("PROPFIND", "/d/", nil)
		if d != "" {
			r.Header.Set("Depth", d)
		}
		if code, _ := checkDAVBody(r); code != 403 {
			t.Errorf("Depth %q: %d, want 403", d, code)
		}
	}
}
