package web

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"io"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/webdav"
)

// lockTable holds the WebDAV locks of a gateway, exclusive and shared
// (RFC 4918, section 6): a lock conflicts with another on the same
// resource, or on a resource below a depth-infinity one, unless both are
// shared. golang.org/x/net/webdav's own lock system takes exclusive locks
// only, and its LockDetails has no scope: a LOCK asking for a shared lock
// is marked as such before the library sees it (sharedLock), and the
// library's reply, which always says exclusive, is corrected after
// (sharedReply).
type lockTable struct {
	mu      sync.Mutex
	byToken map[string]*davLock
}

type davLock struct {
	d       webdav.LockDetails
	shared  bool
	expires time.Time
	held    int // requests that confirmed it and have not ended
}

func newLockTable() *lockTable { return &lockTable{byToken: map[string]*davLock{}} }

// maxDAVLocks bounds the locks a gateway keeps.
const maxDAVLocks = 1 << 16

// covers reports whether lock l covers the resource name.
func (l *davLock) covers(name string) bool {
	r := l.d.Root
	return name == r || !l.d.ZeroDepth && (r == "/" || strings.HasPrefix(name, r+"/"))
}

// overlaps reports whether a lock with details d would lock a resource l
// locks, or the reverse.
func (l *davLock) overlaps(d webdav.LockDetails) bool {
	n := &davLock{d: d}
	return l.covers(d.Root) || n.covers(l.d.Root)
}

// expire forgets the locks whose time is over (t.mu held).
func (t *lockTable) expire(now time.Time) {
	for tok, l := range t.byToken {
		if l.held == 0 && now.After(l.expires) {
			delete(t.byToken, tok)
		}
	}
}

func (t *lockTable) create(now time.Time, d webdav.LockDetails, shared bool) (string, error) {
	d.Root = path.Clean("/" + d.Root)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expire(now)
	for _, l := range t.byToken {
		if l.overlaps(d) && !(shared && l.shared) {
			return "", webdav.ErrLocked
		}
	}
	if len(t.byToken) >= maxDAVLocks {
		return "", webdav.ErrLocked
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	tok := "opaquelocktoken:" + hex.EncodeToString(b[:])
	t.byToken[tok] = &davLock{d: d, shared: shared, expires: expiry(now, d.Duration)}
	return tok, nil
}

// confirm is webdav.LockSystem's Confirm: each named resource must be
// covered by a lock that one of the conditions names.
func (t *lockTable) confirm(now time.Time, name0, name1 string, conditions ...webdav.Condition) (func(), error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expire(now)
	var got []*davLock
	for _, name := range []string{name0, name1} {
		if name == "" {
			continue
		}
		name = path.Clean("/" + name)
		var found *davLock
		for _, c := range conditions {
			if l := t.byToken[c.Token]; l != nil && l.covers(name) {
				found = l
				break
			}
		}
		if found == nil {
			return nil, webdav.ErrConfirmationFailed
		}
		got = append(got, found)
	}
	for _, l := range got {
		l.held++
	}
	return func() {
		t.mu.Lock()
		for _, l := range got {
			l.held--
		}
		t.mu.Unlock()
	}, nil
}

func (t *lockTable) refresh(now time.Time, token string, d time.Duration) (webdav.LockDetails, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expire(now)
	l := t.byToken[token]
	if l == nil {
		return webdav.LockDetails{}, webdav.ErrNoSuchLock
	}
	l.d.Duration, l.expires = d, expiry(now, d)
	return l.d, nil
}

func (t *lockTable) unlock(now time.Time, token string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expire(now)
	l := t.byToken[token]
	if l == nil {
		return webdav.ErrNoSuchLock
	}
	if l.held > 0 {
		return webdav.ErrLocked
	}
	delete(t.byToken, token)
	return nil
}

// isShared reports whether token names a shared lock.
func (t *lockTable) isShared(token string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.byToken[token]
	return l != nil && l.shared
}

// sharedLock reports whether the LOCK request r asks for a shared lock;
// if so, its body (checked and buffered by checkDAVBody) is given to the
// library with the scope exclusive, which it takes, and the lock system
// of the request makes the lock shared.
func sharedLock(r *http.Request) bool {
	if r.Method != "LOCK" || r.Body == nil {
		return false
	}
	b, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	if err != nil {
		return false
	}
	from, to, ok := sharedScope(b)
	if !ok {
		return false
	}
	el := bytes.Replace(b[from:to], []byte("shared"), []byte("exclusive"), 2)
	nb := append(append(append([]byte(nil), b[:from]...), el...), b[to:]...)
	r.Body = io.NopCloser(bytes.NewReader(nb))
	r.ContentLength = int64(len(nb))
	return true
}

// sharedScope finds the DAV:shared element in the DAV:lockscope of a
// lockinfo body, as the byte range of its tags.
func sharedScope(b []byte) (from, to int, ok bool) {
	d := xml.NewDecoder(bytes.NewReader(b))
	var stack []xml.Name
	for {
		start := int(d.InputOffset())
		tok, err := d.Token()
		if err != nil {
			return 0, 0, false
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if e.Name == (xml.Name{Space: "DAV:", Local: "shared"}) && len(stack) == 2 &&
				stack[0] == (xml.Name{Space: "DAV:", Local: "lockinfo"}) && stack[1] == (xml.Name{Space: "DAV:", Local: "lockscope"}) {
				if err := d.Skip(); err != nil {
					return 0, 0, false
				}
				return start, int(d.InputOffset()), true
			}
			stack = append(stack, e.Name)
		case xml.EndElement:
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		}
	}
}

// sharedReply corrects the scope in the library's reply to a LOCK of a
// shared lock (made, or refreshed): it writes exclusive whatever the lock.
type sharedReply struct {
	http.ResponseWriter
	buf    bytes.Buffer
	code   int
	shared func() bool // asked once the reply is complete
}

func (s *sharedReply) WriteHeader(code int) { s.code = code }

func (s *sharedReply) Write(p []byte) (int, error) { return s.buf.Write(p) }

// finish sends the reply, corrected if the lock is shared.
func (s *sharedReply) finish() error {
	b := s.buf.Bytes()
	if s.shared() {
		b = bytes.Replace(b, []byte("<D:lockscope><D:exclusive/></D:lockscope>"), []byte("<D:lockscope><D:shared/></D:lockscope>"), 1)
	}
	if s.code != 0 {
		s.ResponseWriter.WriteHeader(s.code)
	}
	_, err := s.ResponseWriter.Write(b)
	return err
}

// lockTokenOf returns the lock token a LOCK request or its reply names:
// the reply's Lock-Token header (a new lock), or the If header's (a
// refresh).
func lockTokenOf(reply http.Header, r *http.Request) string {
	if t := strings.Trim(reply.Get("Lock-Token"), "<>"); t != "" {
		return t
	}
	h := r.Header.Get("If")
	if i := strings.Index(h, "<opaquelocktoken:"); i >= 0 {
		if j := strings.IndexByte(h[i:], '>'); j > 0 {
			return h[i+1 : i+j]
		}
	}
	return ""
}
