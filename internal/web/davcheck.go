package web

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"pando.dev/pando/internal/vfs"
)

// Checks made on a WebDAV request before golang.org/x/net/webdav sees it:
// its XML body is bounded and well formed as XML namespaces require, and
// the entity tags of its If header are compared (the library compares
// only lock tokens).

// Bounds of a WebDAV request's XML body.
const (
	maxDAVBody  = 1 << 20
	maxDAVDepth = 64
	maxDAVToks  = 100_000
)

// checkDAVBody reads the XML body of a PROPFIND, PROPPATCH or LOCK, checks
// it and puts it back for the handler. It returns a status and a reason
// to refuse it, or 0.
func checkDAVBody(r *http.Request) (int, string) {
	if r.Method == "PROPFIND" {
		if d := strings.ToLower(strings.TrimSpace(r.Header.Get("Depth"))); d != "0" && d != "1" {
			// A walk of everything below, to the whole namespace.
			return http.StatusForbidden, "PROPFIND is served with Depth 0 or 1 only (propfind-finite-depth); list one level at a time"
		}
	}
	switch r.Method {
	case "PROPFIND", "PROPPATCH", "LOCK":
	default:
		return 0, ""
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxDAVBody+1))
	if err != nil {
		return http.StatusBadRequest, "the request body could not be read"
	}
	if len(b) > maxDAVBody {
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("a %s body is limited to %d bytes", r.Method, maxDAVBody)
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	d := xml.NewDecoder(bytes.NewReader(b))
	depth := 0
	for n := 0; ; n++ {
		if n > maxDAVToks {
			return http.StatusRequestEntityTooLarge, fmt.Sprintf("a %s body is limited to %d XML tokens", r.Method, maxDAVToks)
		}
		t, err := d.Token()
		if errors.Is(err, io.EOF) {
			return 0, ""
		}
		if err != nil {
			return http.StatusBadRequest, "the XML body is malformed: " + err.Error()
		}
		switch t := t.(type) {
		case xml.StartElement:
			if depth++; depth > maxDAVDepth {
				return http.StatusBadRequest, fmt.Sprintf("the XML body nests deeper than %d", maxDAVDepth)
			}
			for _, a := range t.Attr {
				if a.Name.Space == "xmlns" && a.Value == "" {
					return http.StatusBadRequest, fmt.Sprintf("the XML body undeclares the namespace prefix %q, which XML namespaces 1.0 forbids", a.Name.Local)
				}
			}
		case xml.EndElement:
			depth--
		case xml.Directive:
			return http.StatusBadRequest, "the XML body may not have a DTD"
		}
	}
}

// ifCond is one condition of an If header list.
type ifCond struct {
	not         bool
	token, etag string
}

// ifList is a list of an If header, for resource (its path, "" for the
// request's).
type ifList struct {
	resource string
	conds    []ifCond
}

// parseIf parses an If header (RFC 4918 10.4); ok is false if it does
// not parse.
func parseIf(s string) (lists []ifList, ok bool) {
	resource := ""
	for {
		s = strings.TrimSpace(s)
		if s == "" {
			return lists, len(lists) > 0
		}
		switch s[0] {
		case '<':
			end := strings.IndexByte(s, '>')
			if end < 0 {
				return nil, false
			}
			u, err := url.Parse(s[1:end])
			if err != nil {
				return nil, false
			}
			resource, s = u.Path, s[end+1:]
		case '(':
			end := strings.IndexByte(s, ')')
			if end < 0 {
				return nil, false
			}
			l := ifList{resource: resource}
			in := strings.TrimSpace(s[1:end])
			s = s[end+1:]
			for in != "" {
				var c ifCond
				if rest, found := strings.CutPrefix(in, "Not"); found {
					c.not, in = true, strings.TrimSpace(rest)
				}
				if in == "" {
					return nil, false
				}
				var close byte = '>'
				if in[0] == '[' {
					close = ']'
				} else if in[0] != '<' {
					return nil, false
				}
				end := strings.IndexByte(in, close)
				if end < 0 {
					return nil, false
				}
				if close == ']' {
					c.etag = in[1:end]
				} else {
					c.token = in[1:end]
				}
				l.conds = append(l.conds, c)
				in = strings.TrimSpace(in[end+1:])
			}
			if len(l.conds) == 0 {
				return nil, false
			}
			lists = append(lists, l)
		default:
			return nil, false
		}
	}
}

// ifFails reports whether the If header of r cannot hold: each of its
// lists has an entity-tag condition that is false (lock tokens are left
// to the webdav handler).
func ifFails(ctx context.Context, v *vfs.FS, r *http.Request, p string) bool {
	h := r.Header.Get("If")
	if h == "" {
		return false
	}
	lists, ok := parseIf(h)
	if !ok {
		return false // the handler answers it
	}
	for _, l := range lists {
		res := p
		if l.resource != "" {
			c, err := CleanPath(l.resource)
			if err != nil {
				return false
			}
			res = c
		}
		etag := ""
		if a, err := v.GetAttr(ctx, res); err == nil {
			etag = ETag(a)
		}
		known := false
		for _, c := range l.conds {
			if c.token == "" && (c.etag == etag) == c.not {
				known = true
			}
		}
		if !known {
			return false
		}
	}
	return true
}
