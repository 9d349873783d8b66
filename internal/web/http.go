package web

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/webdav"

	"pando.dev/pando/internal/vfs"
)

// Server is the HTTP(S) front end of a gateway: plain HTTP (GET with
// ranges, HEAD, conditional requests, listings, PUT, DELETE) and, if
// DAV is set, WebDAV class 1 and 2 on the same URLs. The URL path is the
// global path: https://gw/uva/data/f.txt is /uva/data/f.txt.
type Server struct {
	users  Users
	authn  Authenticator
	realm  string
	dav    bool
	locks  *gridLocks
	c      *Counters
	log    *slog.Logger
	pages  Pages
	active transfers
	// Spool is where PUT bodies are kept whole before they are written
	// (default: the system's temporary directory).
	Spool string
}

// Users gives each request the file system of the user who made it:
// a vfs whose every request carries that user's rights.
type Users interface {
	Acquire(ctx context.Context, user string) (*vfs.FS, error)
	Release(user string)
}

// Authenticator names the user who made a request, or fails; with no
// credentials at all, with ErrNoCredentials.
type Authenticator interface {
	User(r *http.Request) (string, error)
}

// ErrNoCredentials: the request carries no credentials.
var ErrNoCredentials = errors.New("no credentials")

// Counters count a server's requests by outcome.
type Counters struct {
	Requests, Refused, Unauthenticated atomic.Int64
	// Direct counts opens read straight from the cache's data file.
	Direct atomic.Int64
}

// NewServer serves the namespace of users over HTTP, with WebDAV if dav
// is set; realm names the domain in authentication challenges; pages, if
// not nil, gives the web page ACLs and figures.
func NewServer(users Users, authn Authenticator, realm string, dav bool, c *Counters, log *slog.Logger, pages Pages) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{users: users, authn: authn, realm: realm, dav: dav, locks: newGridLocks(), c: c, log: log, pages: pages}
}

// Limits of the HTTP front end.
const (
	maxHeaderBytes = 64 << 10
	headerTimeout  = 10 * time.Second
)

// Close releases the locks WebDAV clients hold at the shares.
func (s *Server) Close() { s.locks.close() }

// Serve serves on ln until it is closed: over TLS with tc unless tc is
// nil (loopback only, --insecure).
func (s *Server) Serve(ln net.Listener, tc *tls.Config) error { return serveHTTP(s, ln, tc, s.log) }

func serveHTTP(h http.Handler, ln net.Listener, tc *tls.Config, log *slog.Logger) error {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: headerTimeout, MaxHeaderBytes: maxHeaderBytes, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	return hs.Serve(ln)
}

// CleanPath checks a request's path: absolute, without ".", "..", empty
// names, NUL or backslashes (a Windows client's separator), however they
// were escaped. It returns the path without its trailing slash.
func CleanPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", errors.New("the path must begin with /")
	}
	if len(p) > 16<<10 {
		return "", errors.New("the path is too long")
	}
	trimmed := strings.TrimSuffix(p, "/")
	if trimmed == "" {
		return "/", nil
	}
	for _, name := range strings.Split(trimmed[1:], "/") {
		switch {
		case name == "":
			return "", errors.New("the path has an empty name (//)")
		case name == "." || name == "..":
			return "", errors.New("the path may not contain . or .. names")
		case strings.ContainsAny(name, "\x00\\"):
			return "", errors.New("the path may not contain NUL or backslashes")
		}
	}
	return trimmed, nil
}

// Status is the HTTP status of a vfs error.
func Status(err error) int {
	switch Errno(err) {
	case syscall.ENOENT:
		return http.StatusNotFound
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return http.StatusForbidden
	case syscall.EEXIST, syscall.ENOTEMPTY, syscall.ENOTDIR, syscall.EISDIR:
		return http.StatusConflict
	case syscall.ENOSPC, syscall.EDQUOT:
		return http.StatusInsufficientStorage
	case syscall.ENAMETOOLONG:
		return http.StatusRequestURITooLong
	case syscall.EHOSTUNREACH, syscall.ETIMEDOUT, syscall.EAGAIN, syscall.ENOBUFS:
		return http.StatusServiceUnavailable
	case syscall.EINVAL:
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

func (s *Server) fail(w http.ResponseWriter, code int, msg string) {
	if code == http.StatusForbidden || code == http.StatusUnauthorized {
		s.c.Refused.Add(1)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

func (s *Server) failErr(w http.ResponseWriter, p string, err error) {
	s.fail(w, Status(err), fmt.Sprintf("%s: %v", p, err))
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.c.Requests.Add(1)
	user, err := s.authn.User(r)
	if err != nil {
		s.c.Unauthenticated.Add(1)
		w.Header().Set("WWW-Authenticate", `Basic realm="pando `+s.realm+`", charset="UTF-8"`)
		if errors.Is(err, ErrNoCredentials) {
			s.fail(w, http.StatusUnauthorized, "sign in: present your pando user certificate, a bearer token (Authorization: Bearer), or a user name and password of this gateway")
		} else {
			s.fail(w, http.StatusUnauthorized, err.Error())
		}
		return
	}
	if strings.HasPrefix(r.URL.Path, pandoPrefix) && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		s.own(r.Context(), w, r, user)
		return
	}
	p, err := CleanPath(r.URL.Path)
	if err != nil {
		s.fail(w, http.StatusBadRequest, fmt.Sprintf("%q: %v", r.URL.Path, err))
		return
	}
	if code, msg := checkHTTPRequest(r, s.dav); code != 0 {
		if code == http.StatusMethodNotAllowed || code == http.StatusNotImplemented {
			w.Header().Set("Allow", strings.Join(allowed(s.dav), ", "))
		}
		s.fail(w, code, msg)
		return
	}
	if dst := r.Header.Get("Destination"); dst != "" {
		u, err := url.Parse(dst)
		if err == nil {
			_, err = CleanPath(u.Path)
		}
		if err != nil {
			s.fail(w, http.StatusBadRequest, fmt.Sprintf("Destination %q: %v", dst, err))
			return
		}
	}
	if r.Method == http.MethodPut {
		// The body is had whole before anything is written: a PUT cut
		// short changes nothing.
		t := &transfer{user: user, method: r.Method, path: p, size: r.ContentLength, start: time.Now()}
		defer s.active.add(t)()
		r.Body = countingReader{r.Body, t}
		f, err := s.spoolBody(r)
		if err != nil {
			s.fail(w, http.StatusBadRequest, fmt.Sprintf("%s: the body could not be read whole (%v); nothing was written", p, err))
			return
		}
		defer func() { f.Close(); os.Remove(f.Name()) }()
	}
	v, err := s.users.Acquire(r.Context(), user)
	if err != nil {
		s.fail(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	defer s.users.Release(user)
	ctx := r.Context()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if msg := preconditionFails(ctx, v, r, p); msg != "" {
			s.fail(w, http.StatusPreconditionFailed, msg)
			return
		}
	}
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		s.get(ctx, w, r, v, user, p)
	case s.dav:
		if code, msg := checkDAVBody(r); code != 0 {
			s.fail(w, code, msg)
			return
		}
		if ifFails(ctx, v, r, p) {
			s.fail(w, http.StatusPreconditionFailed, "the If header does not hold: no list of it names this version of "+p)
			return
		}
		fsys := &davFS{v: v}
		ls := davLS{g: s.locks, fs: fsys, shared: sharedLock(r)}
		h := &webdav.Handler{FileSystem: fsys, LockSystem: ls}
		out := &davStatus{ResponseWriter: w, fs: fsys, s: s}
		if r.Method != "LOCK" {
			h.ServeHTTP(out, r)
			break
		}
		reply := &sharedReply{ResponseWriter: out, shared: func() bool { return s.locks.mem.isShared(lockTokenOf(w.Header(), r)) }}
		h.ServeHTTP(reply, r)
		_ = reply.finish()
	case r.Method == http.MethodPut:
		s.put(ctx, w, r, v, user, p)
	case r.Method == "MKCOL":
		if _, err := v.Mkdir(ctx, p, 0o755); err != nil {
			s.failErr(w, p, err)
			return
		}
		w.WriteHeader(http.StatusCreated)
	case r.Method == http.MethodDelete:
		s.delete(ctx, w, v, p)
	case r.Method == http.MethodOptions:
		w.Header().Set("Allow", strings.Join(allowed(false), ", "))
		w.WriteHeader(http.StatusNoContent)
	}
}

// allowed is the Allow header's list of the front end's methods.
func allowed(dav bool) []string {
	if dav {
		return davMethods
	}
	return httpMethods
}

func (s *Server) get(ctx context.Context, w http.ResponseWriter, r *http.Request, v *vfs.FS, user, p string) {
	f, err := OpenFile(ctx, v, p, syscall.O_RDONLY, 0)
	if err != nil {
		s.failErr(w, p, err)
		return
	}
	defer f.Close()
	a := f.Attr()
	if f.Direct() {
		s.c.Direct.Add(1)
	}
	if f.vf == nil {
		s.list(ctx, w, r, f, user, p)
		return
	}
	if r.URL.Query().Get("download") != "" {
		w.Header().Set("Content-Disposition", "attachment; filename*=UTF-8''"+awsEscape(path.Base(p), false))
	}
	t := &transfer{user: user, method: r.Method, path: p, size: a.Size, start: time.Now()}
	defer s.active.add(t)()
	w = countingWriter{w, t}
	w.Header().Set("ETag", ETag(a))
	w.Header().Set("Accept-Ranges", "bytes")
	// ServeContent answers ranges, If-None-Match, If-Modified-Since,
	// If-Range and If-Match from the ETag and the time.
	http.ServeContent(w, r, path.Base(p), time.Unix(0, a.Mtime), f.content())
}

// Entry is one name of a JSON listing.
type Entry struct {
	Name  string    `json:"name"`
	Type  string    `json:"type"`
	Size  int64     `json:"size"`
	MTime time.Time `json:"mtime"`
	Mode  string    `json:"mode"`
	ETag  string    `json:"etag,omitempty"`
}

func (s *Server) list(ctx context.Context, w http.ResponseWriter, r *http.Request, f *File, user, p string) {
	infos, err := f.Readdir(-1)
	if err != nil {
		s.failErr(w, p, err)
		return
	}
	slices.SortFunc(infos, func(a, b fs.FileInfo) int { return strings.Compare(a.Name(), b.Name()) })
	ents := make([]Entry, 0, len(infos))
	for _, fi := range infos {
		e := Entry{Name: fi.Name(), Type: "file", Size: fi.Size(), MTime: fi.ModTime().UTC(), Mode: fi.Mode().String()}
		switch fi.Mode().Type() {
		case fs.ModeDir:
			e.Type, e.Size = "dir", 0
		case fs.ModeSymlink:
			e.Type = "link"
		case 0:
			e.ETag = ETag(fi.(*FileInfo).Attr())
		default:
			e.Type = "other"
		}
		ents = append(ents, e)
	}
	w.Header().Set("Cache-Control", "no-cache")
	if r.URL.Query().Get("format") == "json" || strings.Contains(r.Header.Get("Accept"), "application/json") {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(struct {
			Path    string  `json:"path"`
			Entries []Entry `json:"entries"`
		}{p, ents})
		return
	}
	s.listPage(ctx, w, r, user, p, ents)
}

// spoolBody reads r's body into a file of the spool and makes that file
// the body.
func (s *Server) spoolBody(r *http.Request) (*os.File, error) {
	f, err := os.CreateTemp(s.Spool, "put-")
	if err != nil {
		return nil, err
	}
	n, err := io.Copy(f, r.Body)
	if err == nil && r.ContentLength >= 0 && n != r.ContentLength {
		err = fmt.Errorf("%d bytes of %d", n, r.ContentLength)
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	r.Body, r.ContentLength = f, n
	return f, nil
}

func escapePath(p string) string { return (&url.URL{Path: p}).EscapedPath() }

func (s *Server) put(ctx context.Context, w http.ResponseWriter, r *http.Request, v *vfs.FS, user, p string) {
	a, err := v.GetAttr(ctx, p)
	exists := err == nil
	if exists && a.Mode&syscall.S_IFMT != syscall.S_IFREG {
		s.fail(w, http.StatusConflict, p+" is not a file")
		return
	}
	f, err := OpenFile(ctx, v, p, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC, 0o644)
	if err != nil {
		if Errno(err) == syscall.ENOENT {
			s.fail(w, http.StatusConflict, fmt.Sprintf("%s: the directory it would be in does not exist", p))
			return
		}
		s.failErr(w, p, err)
		return
	}
	_, err = io.Copy(f, r.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.failErr(w, p, err)
		return
	}
	if a, err := v.GetAttr(ctx, p); err == nil {
		w.Header().Set("ETag", ETag(a))
	}
	if exists {
		w.WriteHeader(http.StatusNoContent)
	} else {
		w.WriteHeader(http.StatusCreated)
	}
}

func (s *Server) delete(ctx context.Context, w http.ResponseWriter, v *vfs.FS, p string) {
	a, err := v.GetAttr(ctx, p)
	if err == nil {
		if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			err = v.Rmdir(ctx, p)
		} else {
			err = v.Unlink(ctx, p)
		}
	}
	if err != nil {
		s.failErr(w, p, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
