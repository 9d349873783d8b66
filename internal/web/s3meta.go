package web

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"syscall"
)

// An object's metadata (x-amz-meta-*, and the headers S3 keeps with an
// object and answers with it) is kept at the share in the extended
// attribute user.s3.meta, as a JSON object of header names and values:
// every door sees it (getfattr -n user.s3.meta on a mount), and it moves
// and is copied with the file. A PUT replaces it whole, as S3 does.

const (
	s3MetaXattr = "user.s3.meta"
	// maxS3Meta bounds the user-defined metadata, as S3's 2 KB does.
	maxS3Meta = 2 << 10
)

// s3KeptHeaders are the standard headers kept with an object.
var s3KeptHeaders = []string{"Content-Type", "Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language", "Expires"}

// s3Meta is an object's metadata: canonical header names and values.
type s3Meta map[string]string

// requestMeta is the metadata a PUT, a copy with REPLACE or an initiate
// of a multipart upload gives.
func requestMeta(h http.Header) (s3Meta, error) {
	m := s3Meta{}
	user := 0
	for name, vals := range h {
		if len(vals) == 0 {
			continue
		}
		c := http.CanonicalHeaderKey(name)
		if strings.HasPrefix(c, "X-Amz-Meta-") {
			user += len(c) - len("X-Amz-Meta-") + len(vals[0])
			m[c] = vals[0]
			continue
		}
		for _, k := range s3KeptHeaders {
			if c == k {
				m[c] = vals[0]
			}
		}
		if c == "Content-Encoding" {
			// aws-chunked says how the body was sent, not what it is:
			// S3 keeps the rest.
			var keep []string
			for _, e := range strings.Split(vals[0], ",") {
				if e = strings.TrimSpace(e); e != "" && !strings.EqualFold(e, "aws-chunked") {
					keep = append(keep, e)
				}
			}
			if len(keep) == 0 {
				delete(m, c)
			} else {
				m[c] = strings.Join(keep, ",")
			}
		}
	}
	if user > maxS3Meta {
		return nil, s3Errf(http.StatusBadRequest, "MetadataTooLarge", "the user-defined metadata is %d bytes; at most %d are kept", user, maxS3Meta)
	}
	return m, nil
}

// meta reads the metadata of the object at p (none if it has none).
func (q *s3Req) meta(p string) s3Meta {
	b, err := q.v.GetXattr(q.ctx, p, s3MetaXattr)
	if err != nil {
		return nil
	}
	var m s3Meta
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return m
}

// setMeta keeps m as the metadata of the object at p, or removes what
// it had if m is empty.
func (q *s3Req) setMeta(p string, m s3Meta) error {
	if len(m) == 0 {
		if err := q.v.RemoveXattr(q.ctx, p, s3MetaXattr); err != nil && Errno(err) != syscall.ENODATA && Errno(err) != syscall.ENOENT {
			return err
		}
		return nil
	}
	b, _ := json.Marshal(m)
	return q.v.SetXattr(q.ctx, p, s3MetaXattr, b, 0)
}

// writeMeta sets the answer's headers from m, and returns the writer to
// answer with: Content-Encoding is set only as the header is written, as
// net/http's ServeContent leaves out Content-Length when it sees one.
func (q *s3Req) writeMeta(m s3Meta) http.ResponseWriter {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if k == http.CanonicalHeaderKey(k) && k != "Content-Encoding" && (strings.HasPrefix(k, "X-Amz-Meta-") || isKept(k)) {
			q.w.Header().Set(k, m[k])
		}
	}
	if enc := m["Content-Encoding"]; enc != "" {
		return &encodingWriter{q.w, enc}
	}
	return q.w
}

// encodingWriter sets Content-Encoding as the header is written.
type encodingWriter struct {
	http.ResponseWriter
	enc string
}

func (e *encodingWriter) WriteHeader(code int) {
	e.Header().Set("Content-Encoding", e.enc)
	e.ResponseWriter.WriteHeader(code)
}

func (e *encodingWriter) Write(b []byte) (int, error) {
	if e.Header().Get("Content-Encoding") == "" {
		e.WriteHeader(http.StatusOK)
	}
	return e.ResponseWriter.Write(b)
}

func isKept(k string) bool {
	for _, h := range s3KeptHeaders {
		if h == k {
			return true
		}
	}
	return false
}
