package web

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"pando.dev/pando/internal/vfs"
)

// What the HTTP and WebDAV front ends serve, as an allow-list checked
// before a request reaches the vfs: its method, its query parameters and
// the headers that would change what it does. Anything else is refused
// with HTTP's own status, never served as the plain request it resembles
// (a PUT of a range taken as a whole PUT would cut the file to the range;
// a PUT whose condition was ignored would replace a version the client
// did not mean to).

// davMethods are the methods of the WebDAV front end (RFC 4918 class 1
// and 2, as golang.org/x/net/webdav serves them).
var davMethods = []string{"OPTIONS", "GET", "HEAD", "PUT", "DELETE", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "PROPFIND", "PROPPATCH"}

// httpMethods are the methods of the plain HTTP front end.
var httpMethods = []string{"OPTIONS", "GET", "HEAD", "PUT", "DELETE", "MKCOL"}

// getParams are the query parameters a GET or HEAD takes: download (the
// page's download links) and format (format=json lists a directory).
var getParams = []string{"download", "format"}

// checkHTTPRequest refuses a request the front end does not serve: the
// status (0 if it is served), and the reason to give.
func checkHTTPRequest(r *http.Request, dav bool) (int, string) {
	methods := httpMethods
	if dav {
		methods = davMethods
	}
	if !slices.Contains(methods, r.Method) {
		switch r.Method {
		case http.MethodPost, http.MethodPatch, "COPY", "MOVE", "LOCK", "UNLOCK", "PROPFIND", "PROPPATCH":
			// Methods HTTP or WebDAV define that this front end does not
			// allow on its resources.
			return http.StatusMethodNotAllowed, r.Method + " is not served here (" + strings.Join(methods, ", ") + dav2(dav) + ")"
		}
		return http.StatusNotImplemented, fmt.Sprintf("the method %.40q is not served here (%s%s)", r.Method, strings.Join(methods, ", "), dav2(dav))
	}
	for k := range r.URL.Query() {
		if (r.Method != http.MethodGet && r.Method != http.MethodHead) || !slices.Contains(getParams, k) {
			return http.StatusNotImplemented, fmt.Sprintf("the query parameter %.40q is not served with %s; nothing was done", k, r.Method)
		}
	}
	if r.Method == http.MethodPut && r.Header.Get("Content-Range") != "" {
		return http.StatusNotImplemented, "a PUT replaces a whole file; Content-Range is not taken, and nothing was written"
	}
	if e := r.Header.Get("Content-Encoding"); r.Method == http.MethodPut && e != "" && !strings.EqualFold(e, "identity") {
		return http.StatusUnsupportedMediaType, fmt.Sprintf("a PUT is stored as sent: Content-Encoding %.40q is not taken, and nothing was written", e)
	}
	return 0, ""
}

func dav2(dav bool) string {
	if dav {
		return ""
	}
	return "; WebDAV with pando serve webdav"
}

// preconditionFails checks the conditions of a request that changes p
// (If-Match, If-None-Match, If-Unmodified-Since, RFC 9110 13.2.2) against
// p as it is: a condition that does not hold changes nothing. It returns
// the reason to answer 412 with, or "".
func preconditionFails(ctx context.Context, v *vfs.FS, r *http.Request, p string) string {
	h := r.Header
	m, nm, ius := h.Get("If-Match"), h.Get("If-None-Match"), h.Get("If-Unmodified-Since")
	if m == "" && nm == "" && ius == "" {
		return ""
	}
	a, err := v.GetAttr(ctx, p)
	exists := err == nil
	etag := ""
	if exists {
		etag = ETag(a)
	}
	if m != "" {
		if !exists || !etagIn(m, etag) {
			return p + " is not the version named in If-Match; nothing was changed"
		}
	} else if ius != "" && exists {
		if t, err := http.ParseTime(ius); err == nil && time.Unix(0, a.Mtime).Truncate(time.Second).After(t) {
			return p + " was changed after the date in If-Unmodified-Since; nothing was changed"
		}
	}
	if nm != "" && exists && etagIn(nm, etag) {
		if nm == "*" {
			return p + " exists and If-None-Match: * was given; nothing was changed"
		}
		return p + " is the version named in If-None-Match; nothing was changed"
	}
	if err != nil && Errno(err) != syscall.ENOENT && m != "" {
		return fmt.Sprintf("%s: its version could not be had (%v); nothing was changed", p, err)
	}
	return ""
}
