package web

import (
	"crypto/md5"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"pando.dev/pando/internal/wire"
)

// copySource opens the object x-amz-copy-source names, after checking the
// x-amz-copy-source-if-* conditions against it; it returns the open file
// and the source's bucket and key.
func (q *s3Req) copySource() (f *File, bucket, key string, err error) {
	// The query is cut before the key is unescaped: a key may hold a
	// ? (sent as %3F).
	src, query, _ := strings.Cut(q.r.Header.Get("X-Amz-Copy-Source"), "?")
	if u, err := url.PathUnescape(src); err == nil {
		src = u
	}
	if query != "" {
		vals, _ := url.ParseQuery(query)
		if len(vals) != 1 || !vals.Has("versionId") {
			return nil, "", "", s3Errf(http.StatusBadRequest, "InvalidArgument", "x-amz-copy-source %.80q: only ?versionId may follow the key", src)
		}
		if vals.Get("versionId") != "null" {
			return nil, "", "", s3Errf(http.StatusNotImplemented, "NotImplemented", "versions are not kept: only versionId=null (the object itself) is served")
		}
	}
	bucket, key, _ = strings.Cut(strings.TrimPrefix(src, "/"), "/")
	if err := checkBucket(bucket); err != nil {
		return nil, "", "", err
	}
	if err := checkKey(key); err != nil || strings.HasSuffix(key, "/") {
		return nil, "", "", s3Errf(http.StatusBadRequest, "InvalidArgument", "x-amz-copy-source %.80q names no object", src)
	}
	sp := path.Join(q.s.root, bucket, key)
	f, err = OpenFile(q.ctx, q.v, sp, syscall.O_RDONLY, 0)
	if err != nil {
		return nil, "", "", err
	}
	if f.vf == nil {
		f.Close()
		return nil, "", "", s3Errf(http.StatusBadRequest, "InvalidArgument", "x-amz-copy-source %.80q is a directory", src)
	}
	if err := q.preconditions("X-Amz-Copy-Source-", sp, f.Attr()); err != nil {
		f.Close()
		return nil, "", "", err
	}
	return f, bucket, key, nil
}

// preconditions checks the conditional headers (If-Match, If-None-Match,
// If-Modified-Since, If-Unmodified-Since, each after prefix) against the
// object at p, as RFC 9110 orders them: a match condition given decides
// over the date beside it.
func (q *s3Req) preconditions(prefix, p string, a wire.Attr) error {
	h := q.r.Header
	etag := q.etag(p, a)
	mtime := time.Unix(0, a.Mtime).Truncate(time.Second)
	failed := s3Errf(http.StatusPreconditionFailed, "PreconditionFailed", "at least one of the preconditions given did not hold")
	date := func(name string) (time.Time, bool) {
		t, err := http.ParseTime(h.Get(prefix + name))
		return t, err == nil
	}
	if m := h.Get(prefix + "If-Match"); m != "" {
		if !etagIn(m, etag) {
			return failed
		}
	} else if t, ok := date("If-Unmodified-Since"); ok && mtime.After(t) {
		return failed
	}
	notModified := failed
	if prefix == "" && (q.r.Method == http.MethodGet || q.r.Method == http.MethodHead) {
		notModified = &s3Error{http.StatusNotModified, "NotModified", "not modified"}
	}
	if m := h.Get(prefix + "If-None-Match"); m != "" {
		if etagIn(m, etag) {
			return notModified
		}
	} else if t, ok := date("If-Modified-Since"); ok && !mtime.After(t) {
		return notModified
	}
	return nil
}

// etagIn reports whether the list of entity tags in a conditional header
// holds etag (or is *).
func etagIn(list, etag string) bool {
	for _, t := range strings.Split(list, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag || `"`+t+`"` == etag {
			return true
		}
	}
	return false
}

// putPreconditions checks a PUT's If-Match and If-None-Match against
// the object at p, which may not exist: a conditional write that does not
// hold changes nothing.
func (q *s3Req) putPreconditions(p string) error {
	m, nm := q.r.Header.Get("If-Match"), q.r.Header.Get("If-None-Match")
	if m == "" && nm == "" {
		return nil
	}
	if nm != "" && nm != "*" {
		return s3Errf(http.StatusNotImplemented, "NotImplemented", "If-None-Match on a write takes only *")
	}
	a, err := q.v.GetAttr(q.ctx, p)
	switch {
	case Errno(err) == syscall.ENOENT:
		if m != "" {
			return s3Errf(http.StatusNotFound, "NoSuchKey", "%s does not exist, so If-Match cannot hold", q.key)
		}
		return nil
	case err != nil:
		return err
	case nm == "*":
		return s3Errf(http.StatusPreconditionFailed, "PreconditionFailed", "%s exists and If-None-Match: * was given; nothing was written", q.key)
	case !etagIn(m, q.etag(p, a)):
		return s3Errf(http.StatusPreconditionFailed, "PreconditionFailed", "%s is not the version named in If-Match; nothing was written", q.key)
	}
	return nil
}

// copyRange is x-amz-copy-source-range of an object of size bytes: start
// and length.
func copyRange(h string, size int64) (int64, int64, error) {
	bad := s3Errf(http.StatusBadRequest, "InvalidArgument", "x-amz-copy-source-range must be bytes=first-last within the source object")
	if h == "" {
		return 0, size, nil
	}
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok {
		return 0, 0, bad
	}
	a, b, ok := strings.Cut(spec, "-")
	first, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || first < 0 || last < first {
		return 0, 0, bad
	}
	if last >= size {
		return 0, 0, s3Errf(http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "x-amz-copy-source-range %.60q is past the end of the source (%d bytes)", h, size)
	}
	return first, last - first + 1, nil
}

// copyPart copies x-amz-copy-source (x-amz-copy-source-range of it) into
// a part's file dst, and returns the part's MD5.
func (q *s3Req) copyPart(dst string) ([]byte, error) {
	f, _, _, err := q.copySource()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	off, n, err := copyRange(q.r.Header.Get("X-Amz-Copy-Source-Range"), f.Attr().Size)
	if err != nil {
		return nil, err
	}
	if n > maxObject {
		return nil, s3Errf(http.StatusBadRequest, "InvalidArgument", "a part has at most %d bytes", int64(maxObject))
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	h := md5.New()
	got, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(f, n))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && got != n {
		err = fmt.Errorf("the source ended after %d of %d bytes", got, n)
	}
	if err != nil {
		os.Remove(dst)
		return nil, err
	}
	return h.Sum(nil), nil
}

// listParts answers ListParts: the parts of an upload under way.
func (q *s3Req) listParts(id string, u *upload) error {
	vals := q.r.URL.Query()
	max, err := countParam(vals, "max-parts", 1000, 1000)
	if err != nil {
		return err
	}
	marker, err := countParam(vals, "part-number-marker", 0, maxParts)
	if err != nil {
		return err
	}
	type part struct {
		PartNumber   int
		LastModified string
		ETag         string
		Size         int64
	}
	res := struct {
		XMLName              xml.Name `xml:"ListPartsResult"`
		NS                   string   `xml:"xmlns,attr"`
		Bucket, Key          string
		UploadId             string
		PartNumberMarker     int
		NextPartNumberMarker int
		MaxParts             int
		IsTruncated          bool
		StorageClass         string
		Part                 []part
	}{NS: s3XMLNS, Bucket: q.bucket, Key: q.key, UploadId: id, PartNumberMarker: marker, MaxParts: max, StorageClass: "STANDARD"}
	q.s.mu.Lock()
	var nums []int
	sums := map[int][]byte{}
	for n, sum := range u.parts {
		if n > marker {
			nums = append(nums, n)
			sums[n] = sum
		}
	}
	q.s.mu.Unlock()
	sort.Ints(nums)
	for _, n := range nums {
		if len(res.Part) == max {
			res.IsTruncated = true
			break
		}
		fi, err := os.Stat(filepath.Join(u.dir, fmt.Sprintf("part-%05d", n)))
		if err != nil {
			continue // aborted or completed meanwhile
		}
		res.Part = append(res.Part, part{n, s3Time(fi.ModTime().UnixNano()), fmt.Sprintf(`"%x"`, sums[n]), fi.Size()})
		res.NextPartNumberMarker = n
	}
	writeXML(q.w, res)
	return nil
}

// listUploads answers ListMultipartUploads: the caller's uploads under
// way in the bucket (an upload is its initiator's alone: no one else may
// send its parts or see them).
func (q *s3Req) listUploads(vals url.Values) error {
	max, err := countParam(vals, "max-uploads", 1000, 1000)
	if err != nil {
		return err
	}
	prefix, delim := vals.Get("prefix"), vals.Get("delimiter")
	keyMarker, idMarker := vals.Get("key-marker"), vals.Get("upload-id-marker")
	type entry struct {
		key, id string
		started time.Time
	}
	var all []entry
	q.s.mu.Lock()
	for id, u := range q.s.uploads {
		if u.user == q.user && u.bucket == q.bucket && strings.HasPrefix(u.key, prefix) && time.Since(u.started) <= uploadLife {
			all = append(all, entry{u.key, id, u.started})
		}
	}
	q.s.mu.Unlock()
	sort.Slice(all, func(i, j int) bool {
		if all[i].key != all[j].key {
			return all[i].key < all[j].key
		}
		return all[i].started.Before(all[j].started) || (all[i].started.Equal(all[j].started) && all[i].id < all[j].id)
	})
	type owner struct{ ID, DisplayName string }
	type up struct {
		Key          string
		UploadId     string
		Initiator    owner
		Owner        owner
		StorageClass string
		Initiated    string
	}
	type cp struct{ Prefix string }
	res := struct {
		XMLName            xml.Name `xml:"ListMultipartUploadsResult"`
		NS                 string   `xml:"xmlns,attr"`
		Bucket             string
		KeyMarker          string
		UploadIdMarker     string
		NextKeyMarker      string
		NextUploadIdMarker string
		Prefix             string
		Delimiter          string `xml:",omitempty"`
		MaxUploads         int
		IsTruncated        bool
		Upload             []up
		CommonPrefixes     []cp
	}{NS: s3XMLNS, Bucket: q.bucket, KeyMarker: keyMarker, UploadIdMarker: idMarker, Prefix: prefix, Delimiter: delim, MaxUploads: max}
	seen := map[string]bool{}
	n := 0
	for _, e := range all {
		if keyMarker != "" && (e.key < keyMarker || (e.key == keyMarker && (idMarker == "" || e.id <= idMarker))) {
			continue
		}
		if delim != "" {
			if i := strings.Index(e.key[len(prefix):], delim); i >= 0 {
				cpx := e.key[:len(prefix)+i+len(delim)]
				if !seen[cpx] {
					if n == max {
						res.IsTruncated = true
						break
					}
					seen[cpx] = true
					res.CommonPrefixes = append(res.CommonPrefixes, cp{cpx})
					res.NextKeyMarker, res.NextUploadIdMarker = e.key, e.id
					n++
				}
				continue
			}
		}
		if n == max {
			res.IsTruncated = true
			break
		}
		who := owner{q.user, q.user}
		res.Upload = append(res.Upload, up{e.key, e.id, who, who, "STANDARD", s3Time(e.started.UnixNano())})
		res.NextKeyMarker, res.NextUploadIdMarker = e.key, e.id
		n++
	}
	if !res.IsTruncated {
		res.NextKeyMarker, res.NextUploadIdMarker = "", ""
	}
	writeXML(q.w, res)
	return nil
}

// countParam is the query parameter name, a count of 0 or more taken at
// most as limit; def if it is absent.
func countParam(vals url.Values, name string, def, limit int) (int, error) {
	m := vals.Get(name)
	if m == "" {
		return def, nil
	}
	n, err := strconv.Atoi(m)
	if err != nil || n < 0 {
		return 0, s3Errf(http.StatusBadRequest, "InvalidArgument", "%s must be a number of at least 0", name)
	}
	return min(n, limit), nil
}
