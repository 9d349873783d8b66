package web

import (
	"bufio"
	"crypto/md5"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"pando.dev/pando/internal/wire"
)

// An object's ETag is the MD5 of its content when the gateway wrote it
// and it has not changed since (kept in user.s3.md5 with the size and
// modification time it was for), else the version ETag of the HTTP
// gateway.
func (q *s3Req) etag(p string, a wire.Attr) string {
	if b, err := q.v.GetXattr(q.ctx, p, s3MD5Xattr); err == nil {
		if f := strings.Split(string(b), ":"); len(f) == 3 && f[0] == strconv.FormatInt(a.Mtime, 10) && f[1] == strconv.FormatInt(a.Size, 10) {
			return `"` + f[2] + `"`
		}
	}
	return ETag(a)
}

func (q *s3Req) setMD5(p, sum string) {
	if a, err := q.v.GetAttr(q.ctx, p); err == nil {
		val := strconv.FormatInt(a.Mtime, 10) + ":" + strconv.FormatInt(a.Size, 10) + ":" + sum
		if err := q.v.SetXattr(q.ctx, p, s3MD5Xattr, []byte(val), 0); err != nil {
			q.s.log.Debug("the MD5 of an object could not be kept", "path", p, "err", err)
		}
	}
}

func (q *s3Req) get() error {
	p := q.path(q.key)
	f, err := OpenFile(q.ctx, q.v, p, syscall.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	a := f.Attr()
	if f.vf == nil {
		if !strings.HasSuffix(q.key, "/") {
			return s3Errf(http.StatusNotFound, "NoSuchKey", "%s is a directory; list it with the prefix %s/", q.key, q.key)
		}
		q.w.Header().Set("ETag", `"`+emptyMD5+`"`)
		q.w.Header().Set("Content-Length", "0")
		q.w.Header().Set("Last-Modified", time.Unix(0, a.Mtime).UTC().Format(http.TimeFormat))
		return nil
	}
	// A 304 carries the object's ETag and date too.
	q.w.Header().Set("ETag", q.etag(p, a))
	q.w.Header().Set("Last-Modified", time.Unix(0, a.Mtime).UTC().Format(http.TimeFormat))
	if err := q.preconditions("", p, a); err != nil {
		return err
	}
	if a.Size == 0 && q.r.Header.Get("Range") != "" {
		return s3Errf(http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "the object is empty: no range of it can be served")
	}
	if f.Direct() {
		q.s.c.Direct.Add(1)
	}
	q.w.Header().Set("Content-Type", "application/octet-stream")
	w := q.writeMeta(q.meta(p))
	// GetObject's response-* parameters name headers of the answer.
	for param, vals := range q.r.URL.Query() {
		if name, ok := strings.CutPrefix(param, "response-"); ok && len(vals) > 0 {
			q.w.Header().Set(http.CanonicalHeaderKey(name), vals[0])
		}
	}
	http.ServeContent(&rangeErrors{ResponseWriter: w, q: q}, q.r, path.Base(p), time.Unix(0, a.Mtime), f.content())
	return nil
}

// mkdirs makes the directories of the bucket down to dir.
func (q *s3Req) mkdirs(dir string) error {
	root := q.path("")
	rel := strings.TrimPrefix(dir, root)
	cur := root
	for _, name := range strings.Split(strings.Trim(rel, "/"), "/") {
		if name == "" {
			continue
		}
		cur += "/" + name
		a, err := q.v.GetAttr(q.ctx, cur)
		if err == nil {
			if a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
				return s3Errf(http.StatusConflict, "InvalidRequest", "%s is an object, so no key may go below it", strings.TrimPrefix(cur, root+"/"))
			}
			continue
		}
		if Errno(err) != syscall.ENOENT {
			return err
		}
		if _, err := q.v.Mkdir(q.ctx, cur, 0o755); err != nil && Errno(err) != syscall.EEXIST {
			return err
		} else if err == nil {
			// Made only to hold a key: removed with the last key in it.
			if err := q.v.SetXattr(q.ctx, cur, s3ImplicitXattr, []byte("1"), 0); err != nil {
				q.s.log.Debug("a directory made for a key could not be marked", "path", cur, "err", err)
			}
		}
	}
	return nil
}

// prune removes the directories above key that the gateway made only to
// hold keys (marked by mkdirs) and that are empty now, as S3 has no
// directories of its own to leave behind; a directory made by a key
// ending in /, or through another door, stays.
func (q *s3Req) prune(key string) {
	root := q.path("")
	for dir := path.Dir(q.path(strings.TrimSuffix(key, "/"))); dir != root && strings.HasPrefix(dir, root+"/"); dir = path.Dir(dir) {
		if b, err := q.v.GetXattr(q.ctx, dir, s3ImplicitXattr); err != nil || string(b) != "1" {
			return
		}
		if err := q.v.Rmdir(q.ctx, dir); err != nil {
			return // not empty, or not ours to remove
		}
	}
}

// write writes the readers' bytes as the object at p, and answers its
// ETag (sum) once the share has it.
func (q *s3Req) write(p, sum string, meta s3Meta, parts ...io.Reader) error {
	if err := q.mkdirs(path.Dir(p)); err != nil {
		return err
	}
	f, err := OpenFile(q.ctx, q.v, p, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	for _, r := range parts {
		if _, err = io.Copy(f, r); err != nil {
			break
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := q.setMeta(p, meta); err != nil {
		q.s.log.Warn("the metadata of an object could not be kept", "path", p, "err", err)
	}
	if sum != "" {
		q.setMD5(p, sum)
		q.w.Header().Set("ETag", `"`+sum+`"`)
	}
	return nil
}

func (q *s3Req) put() error {
	sp, err := q.spool("")
	if err != nil {
		return err
	}
	defer sp.Close()
	p := q.path(q.key)
	if err := q.putPreconditions(p); err != nil {
		return err
	}
	if strings.HasSuffix(q.key, "/") {
		if sp.size != 0 {
			return s3Errf(http.StatusBadRequest, "InvalidArgument", "a key ending in / is a directory and takes no content")
		}
		if err := q.mkdirs(p); err != nil {
			return err
		}
		// Named by its own key, the directory is no longer only a holder.
		if err := q.v.RemoveXattr(q.ctx, p, s3ImplicitXattr); err != nil && Errno(err) != syscall.ENODATA {
			q.s.log.Debug("a directory named by a key could not be unmarked", "path", p, "err", err)
		}
		q.w.Header().Set("ETag", `"`+emptyMD5+`"`)
		return nil
	}
	meta, err := requestMeta(q.r.Header)
	if err != nil {
		return err
	}
	return q.write(p, hex.EncodeToString(sp.md5), meta, sp.f)
}

func (q *s3Req) copy() error {
	f, bucket, key, err := q.copySource()
	if err != nil {
		return err
	}
	defer f.Close()
	replace := q.r.Header.Get("X-Amz-Metadata-Directive") == "REPLACE"
	meta := q.meta(path.Join(q.s.root, bucket, key))
	if replace {
		if meta, err = requestMeta(q.r.Header); err != nil {
			return err
		}
	}
	if bucket == q.bucket && key == q.key {
		if !replace {
			return s3Errf(http.StatusBadRequest, "InvalidRequest", "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes.")
		}
		// Onto itself with REPLACE: the metadata alone changes.
		if err := q.putPreconditions(q.path(q.key)); err != nil {
			return err
		}
		p := q.path(q.key)
		if err := q.setMeta(p, meta); err != nil {
			return err
		}
		a, err := q.v.GetAttr(q.ctx, p)
		if err != nil {
			return err
		}
		writeXML(q.w, struct {
			XMLName      xml.Name `xml:"CopyObjectResult"`
			NS           string   `xml:"xmlns,attr"`
			LastModified string
			ETag         string
		}{NS: s3XMLNS, LastModified: s3Time(a.Mtime), ETag: q.etag(p, a)})
		return nil
	}
	if err := q.putPreconditions(q.path(q.key)); err != nil {
		return err
	}
	// The source is read whole into the spool before the destination is
	// opened for writing: two keys may name one file (a link at the
	// share), which a truncating open would empty before it was read.
	tmp, err := os.CreateTemp(q.s.spool, "copy-")
	if err != nil {
		return err
	}
	defer func() { tmp.Close(); os.Remove(tmp.Name()) }()
	h := md5.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), f)
	if err == nil && n != f.Attr().Size {
		err = fmt.Errorf("the source changed while it was read (%d bytes of %d)", n, f.Attr().Size)
	}
	if err == nil {
		_, err = tmp.Seek(0, io.SeekStart)
	}
	if err != nil {
		return err
	}
	if err := q.write(q.path(q.key), "", meta, tmp); err != nil {
		return err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	q.setMD5(q.path(q.key), sum)
	a, _ := q.v.GetAttr(q.ctx, q.path(q.key))
	writeXML(q.w, struct {
		XMLName      xml.Name `xml:"CopyObjectResult"`
		NS           string   `xml:"xmlns,attr"`
		LastModified string
		ETag         string
	}{NS: s3XMLNS, LastModified: s3Time(a.Mtime), ETag: `"` + sum + `"`})
	return nil
}

// remove removes the object (or empty directory) at key; a missing one
// is no error, as in S3.
func (q *s3Req) remove(key string) error {
	p := q.path(key)
	a, err := q.v.GetAttr(q.ctx, p)
	switch {
	case Errno(err) == syscall.ENOENT:
		return nil
	case err != nil:
		return err
	case a.Mode&syscall.S_IFMT == syscall.S_IFDIR:
		err = q.v.Rmdir(q.ctx, p)
	default:
		err = q.v.Unlink(q.ctx, p)
	}
	if err == nil {
		q.prune(key)
	}
	return err
}

func (q *s3Req) delete() error {
	if m := q.r.Header.Get("If-Match"); m != "" {
		p := q.path(q.key)
		a, err := q.v.GetAttr(q.ctx, p)
		if err != nil {
			return err
		}
		if !etagIn(m, q.etag(p, a)) {
			return s3Errf(http.StatusPreconditionFailed, "PreconditionFailed", "%s is not the version named in If-Match; nothing was deleted", q.key)
		}
	}
	if err := q.remove(q.key); err != nil {
		return err
	}
	q.w.WriteHeader(http.StatusNoContent)
	return nil
}

func (q *s3Req) deleteObjects() error {
	var req struct {
		Quiet   bool
		Objects []struct{ Key, VersionId string } `xml:"Object"`
	}
	if err := q.readXML(&req); err != nil {
		return err
	}
	if len(req.Objects) > 1000 {
		return s3Errf(http.StatusBadRequest, "MalformedXML", "at most 1000 objects are deleted at once")
	}
	type deleted struct {
		Key       string
		VersionId string `xml:",omitempty"`
	}
	type failed struct{ Key, Code, Message string }
	var res struct {
		XMLName xml.Name  `xml:"DeleteResult"`
		NS      string    `xml:"xmlns,attr"`
		Deleted []deleted `xml:"Deleted"`
		Error   []failed  `xml:"Error"`
	}
	res.NS = s3XMLNS
	for _, o := range req.Objects {
		err := checkKey(o.Key)
		if err == nil && o.VersionId != "" && o.VersionId != "null" {
			err = s3Errf(http.StatusNotImplemented, "NotImplemented", "versions are not kept: only VersionId null (the object itself) is deleted")
		}
		if err == nil {
			err = q.remove(o.Key)
		}
		if err != nil {
			e, ok := err.(*s3Error)
			if !ok {
				e = vfsS3Error(err)
			}
			res.Error = append(res.Error, failed{o.Key, e.Code, e.Message})
		} else if !req.Quiet {
			res.Deleted = append(res.Deleted, deleted{o.Key, o.VersionId})
		}
	}
	writeXML(q.w, res)
	return nil
}

// chunkedReader decodes an aws-chunked body without chunk signatures
// (STREAMING-UNSIGNED-PAYLOAD-TRAILER): size in hex, CRLF, data, CRLF,
// ..., a chunk of size 0, then trailer lines and an empty line.
type chunkedReader struct {
	r    *bufio.Reader
	left int64
	done bool
}

func newChunkedReader(r io.Reader) *chunkedReader { return &chunkedReader{r: bufio.NewReader(r)} }

func (c *chunkedReader) line() (string, error) {
	l, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if len(l) > 4096 {
		return "", fmt.Errorf("an aws-chunked line is too long")
	}
	return strings.TrimRight(l, "\r\n"), nil
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	for c.left == 0 {
		if c.done {
			return 0, io.EOF
		}
		l, err := c.line()
		if err != nil {
			return 0, err
		}
		size, _, _ := strings.Cut(l, ";")
		n, err := strconv.ParseInt(size, 16, 64)
		if err != nil || n < 0 || n > maxObject {
			return 0, fmt.Errorf("malformed aws-chunked size %.20q", l)
		}
		if n == 0 {
			for { // trailers, up to an empty line
				t, err := c.line()
				if err != nil {
					return 0, err
				}
				if t == "" {
					break
				}
			}
			c.done = true
			return 0, io.EOF
		}
		c.left = n
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := io.ReadFull(c.r, p)
	c.left -= int64(n)
	if err == nil && c.left == 0 {
		if l, lerr := c.line(); lerr != nil || l != "" {
			return n, fmt.Errorf("malformed aws-chunked body")
		}
	}
	return n, err
}

// rangeErrors answers a range net/http's ServeContent cannot serve with
// S3's InvalidRange error instead of its text.
type rangeErrors struct {
	http.ResponseWriter
	q       *s3Req
	swallow bool
}

func (r *rangeErrors) WriteHeader(code int) {
	if code == http.StatusRequestedRangeNotSatisfiable {
		r.swallow = true
		r.Header().Del("Content-Length")
		r.q.s.fail(r.ResponseWriter, r.q.r, s3Errf(code, "InvalidRange", "the requested range is not satisfiable"))
		return
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *rangeErrors) Write(b []byte) (int, error) {
	if r.swallow {
		return len(b), nil
	}
	return r.ResponseWriter.Write(b)
}
