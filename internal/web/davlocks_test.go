package web

import (
	"bytes"
	"encoding/xml"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/webdav"
)

// TestLockTableScopes: shared locks of a resource coexist; an exclusive
// one conflicts with any other on it, on a resource below a depth-infinity
// lock, or above one; each refusal leaves the table as it was.
func TestLockTableScopes(t *testing.T) {
	now := time.Now()
	tab := newLockTable()
	d := func(root string, zero bool) webdav.LockDetails {
		return webdav.LockDetails{Root: root, Duration: time.Minute, ZeroDepth: zero}
	}
	s1, err := tab.create(now, d("/a/f", true), true)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := tab.create(now, d("/a/f", true), true)
	if err != nil || s2 == s1 {
		t.Fatalf("a second shared lock: %q, %v", s2, err)
	}
	for _, c := range []struct {
		root   string
		zero   bool
		shared bool
	}{
		{"/a/f", true, false},  // exclusive on the shared ones
		{"/a", false, false},   // exclusive, depth infinity, above them
		{"/", false, false},    // the root
		{"a/./f", true, false}, // another spelling
	} {
		if tok, err := tab.create(now, d(c.root, c.zero), c.shared); err != webdav.ErrLocked {
			t.Errorf("lock of %s (shared %v) beside shared locks: %q, %v, want ErrLocked", c.root, c.shared, tok, err)
		}
	}
	if len(tab.byToken) != 2 {
		t.Fatalf("%d locks after the refusals, want 2", len(tab.byToken))
	}
	if _, err := tab.create(now, d("/a", false), true); err != nil {
		t.Fatalf("a shared depth-infinity lock above shared locks: %v", err)
	}
	x, err := tab.create(now, d("/b", false), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tab.create(now, d("/b/c/g", true), true); err != webdav.ErrLocked {
		t.Errorf("a shared lock below an exclusive depth-infinity one: %v", err)
	}

	// Confirm: a resource is confirmed by a token of a lock covering it.
	if _, err := tab.confirm(now, "/a/f", "", webdav.Condition{Token: x}); err != webdav.ErrConfirmationFailed {
		t.Errorf("/a/f confirmed with the token of /b: %v", err)
	}
	release, err := tab.confirm(now, "/a/f", "/b/z", webdav.Condition{Token: s2}, webdav.Condition{Token: x})
	if err != nil {
		t.Fatalf("confirm: %v", err)
	}
	if err := tab.unlock(now, x); err != webdav.ErrLocked {
		t.Errorf("unlock of a lock held by a request: %v", err)
	}
	release()
	if err := tab.unlock(now, x); err != nil {
		t.Errorf("unlock: %v", err)
	}
	if _, err := tab.refresh(now, x, time.Minute); err != webdav.ErrNoSuchLock {
		t.Errorf("refresh of a lock gone: %v", err)
	}
	if !tab.isShared(s1) || tab.isShared(x) {
		t.Error("isShared")
	}

	// Expiry: a lock not refreshed goes; refreshed, it stays.
	if _, err := tab.refresh(now, s1, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Hour)
	if _, err := tab.create(later, d("/a/f", true), false); err != webdav.ErrLocked {
		t.Errorf("exclusive beside a refreshed shared lock: %v", err)
	}
	if err := tab.unlock(later, s2); err != webdav.ErrNoSuchLock {
		t.Errorf("unlock of an expired lock: %v", err)
	}
}

// TestSharedLockBody: a LOCK's DAV:shared scope is found whatever the
// prefix, and only there.
func TestSharedLockBody(t *testing.T) {
	for body, want := range map[string]bool{
		`<?xml version="1.0"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:shared/></D:lockscope><D:locktype><D:write/></D:locktype></D:lockinfo>`:             true,
		`<lockinfo xmlns="DAV:"><lockscope><shared></shared></lockscope><locktype><write/></locktype><owner>shared</owner></lockinfo>`:                       true,
		`<x:lockinfo xmlns:x="DAV:"><x:lockscope><x:exclusive/></x:lockscope><x:locktype><x:write/></x:locktype><x:owner><x:shared/></x:owner></x:lockinfo>`: false,
		`<D:lockinfo xmlns:D="urn:other"><D:lockscope><D:shared/></D:lockscope></D:lockinfo>`:                                                                false,
		``: false,
	} {
		r, _ := http.NewRequest("LOCK", "http://h/d/f", strings.NewReader(body))
		if got := sharedLock(r); got != want {
			t.Errorf("%s: shared %v, want %v", body, got, want)
			continue
		}
		b, _ := io.ReadAll(r.Body)
		if want {
			var li struct {
				Exclusive *struct{} `xml:"DAV: lockscope>exclusive"`
				Shared    *struct{} `xml:"DAV: lockscope>shared"`
			}
			if err := xml.Unmarshal(b, &li); err != nil || li.Exclusive == nil || li.Shared != nil {
				t.Errorf("%s: given to the library as %s (%v)", body, b, err)
			}
		} else if !bytes.Equal(b, []byte(body)) {
			t.Errorf("%s: body changed to %s", body, b)
		}
	}
}
