package web

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// FuzzCleanPath: an accepted path is absolute, without ., .., empty
// names, NUL or backslashes.
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/", "/d/data/x", "/d/../x", "/d//x", "/d/x/", "/a\\b", "/a\x00", "rel", "/d/./x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := CleanPath(s)
		if err != nil {
			return
		}
		if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\x00\\") || (p != "/" && strings.HasSuffix(p, "/")) {
			t.Fatalf("%q accepted as %q", s, p)
		}
		for _, name := range strings.Split(p[1:], "/") {
			if p != "/" && (name == "" || name == "." || name == "..") {
				t.Fatalf("%q accepted as %q", s, p)
			}
		}
	})
}

// FuzzCheckKey: an accepted S3 key has no empty, . or .. name, NUL or
// backslash, and is at most 1024 bytes.
func FuzzCheckKey(f *testing.F) {
	for _, s := range []string{"a", "a/b", "a/", "../x", "a//b", "a\\b", ".", "x/./y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, k string) {
		if checkKey(k) != nil {
			return
		}
		if len(k) > s3MaxKeyBytes || strings.ContainsAny(k, "\x00\\") {
			t.Fatalf("%q accepted", k)
		}
		for _, name := range strings.Split(strings.TrimSuffix(k, "/"), "/") {
			if name == "" || name == "." || name == ".." {
				t.Fatalf("%q accepted", k)
			}
		}
	})
}

// FuzzParseIf: any If header parses or is refused, without panic, and
// every list it gives has conditions.
func FuzzParseIf(f *testing.F) {
	for _, s := range []string{`(<urn:x> ["e"])`, `<http://h/p> (Not <DAV:no-lock> ["e"]) (["f"])`, `(`, `(Not)`, `<`, `(["`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lists, ok := parseIf(s)
		if !ok {
			return
		}
		for _, l := range lists {
			if len(l.conds) == 0 {
				t.Fatalf("%q: a list without conditions", s)
			}
		}
	})
}

// FuzzSigV4: an Authorization header, date and payload hash from the
// fuzzer never pass for a key whose secret they do not know.
func FuzzSigV4(f *testing.F) {
	f.Add("AWS4-HMAC-SHA256 Credential=AK/20260101/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature="+strings.Repeat("0", 64), "20260101T000000Z", "UNSIGNED-PAYLOAD")
	f.Add("AWS4-HMAC-SHA256 Credential=AK/x/y/s3/aws4_request,SignedHeaders=host,Signature=", "", "")
	f.Fuzz(func(t *testing.T, authz, date, payload string) {
		r := httptest.NewRequest("GET", "/b/k", nil)
		r.Header.Set("Authorization", authz)
		r.Header.Set("X-Amz-Date", date)
		r.Header.Set("X-Amz-Content-Sha256", payload)
		now, _ := time.Parse("20060102T150405Z", "20260101T000000Z")
		if user, _, err := sigv4(r, keysOf{"AK": {"alice", "the secret nobody gave the fuzzer"}}, now); err == nil {
			t.Fatalf("passed as %q: %q", user, authz)
		}
	})
}

type keysOf map[string][2]string

func (k keysOf) Secret(a string) (string, string, bool) { e, ok := k[a]; return e[0], e[1], ok }

// FuzzChunked: an aws-chunked body decodes to at most its own length,
// and what decodes is the chunks' data.
func FuzzChunked(f *testing.F) {
	f.Add([]byte("5\r\nhello\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"))
	f.Add([]byte("ffffffffff\r\n"))
	f.Add([]byte("3;chunk-signature=x\r\nabc\r\n0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, _ := io.ReadAll(io.LimitReader(newChunkedReader(bytes.NewReader(b)), int64(len(b))+1))
		if len(out) > len(b) {
			t.Fatalf("%d bytes decoded from %d", len(out), len(b))
		}
	})
}

// FuzzDAVBody: the checks before the webdav handler never panic and
// never let a body past 1 MiB through.
func FuzzDAVBody(f *testing.F) {
	f.Add(`<?xml version="1.0"?><D:propfind xmlns:D="DAV:"><D:allprop/></D:propfind>`)
	f.Add(`<a xmlns:x=""/>`)
	f.Add(`<!DOCTYPE a [<!ENTITY b "c">]><a>&b;</a>`)
	f.Fuzz(func(t *testing.T, s string) {
		r := httptest.NewRequest("PROPFIND", "/d/", strings.NewReader(s))
		r.Header.Set("Depth", "1")
		code, _ := checkDAVBody(r)
		if code == 0 {
			b, _ := io.ReadAll(r.Body)
			if string(b) != s {
				t.Fatal("the body was not put back whole")
			}
		} else if code != http.StatusBadRequest && code != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d", code)
		}
	})
}

// FuzzS3Classify: any method, query and header is named as one served
// operation or refused, without panic; an accepted request takes no query
// parameter its operation does not list, and one that names a
// sub-resource (a setting of the object or bucket) is never taken as a
// plain read, write or delete of it.
func FuzzS3Classify(f *testing.F) {
	for _, s := range [][3]string{
		{"PUT", "acl", ""}, {"PUT", "tagging", ""}, {"DELETE", "tagging", ""}, {"GET", "attributes", ""},
		{"PUT", "partNumber=1&uploadId=x", "x-amz-copy-source"}, {"GET", "", ""}, {"PUT", "x-id=PutObject", ""},
		{"POST", "uploads", ""}, {"GET", "versionId=null", ""}, {"PUT", "", "x-amz-write-offset-bytes"},
	} {
		f.Add(s[0], s[1], s[2], "v", true)
	}
	f.Fuzz(func(t *testing.T, method, query, header, value string, object bool) {
		r, err := http.NewRequest("GET", "https://gw/b/k", nil)
		if err != nil {
			return
		}
		r.Method, r.URL.RawQuery = method, query
		if header != "" {
			r.Header[http.CanonicalHeaderKey(header)] = []string{value}
		}
		key := ""
		if object {
			key = "k"
		}
		op, err := s3Classify(r, "b", key)
		if err != nil {
			return
		}
		q := r.URL.Query()
		allowed := append(append([]string{}, s3CommonParams...), s3OpParams[op]...)
		for k := range q {
			found := false
			for _, a := range allowed {
				found = found || a == k
			}
			if !found {
				t.Fatalf("%s ?%s taken as op %d with %q", method, query, op, k)
			}
		}
		has := func(k string) bool { return q.Has(k) }
		if (op == opGetObject || op == opPutObject || op == opDeleteObject || op == opCopyObject) && hasSubresource(has) {
			t.Fatalf("%s ?%s names a sub-resource, and was taken as op %d", method, query, op)
		}
	})
}
