package web

import (
	"bufio"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Multipart uploads: parts wait in the spool until the upload is
// completed (written as one file through the vfs) or aborted.

// upload is a multipart upload under way: its parts wait in the spool.
type upload struct {
	user, bucket, key, dir string
	meta                   s3Meta         // given at its start, kept with the object
	parts                  map[int][]byte // part number -> MD5
	started                time.Time
}

func (q *s3Req) initiate() error {
	s := q.s
	var idb [16]byte
	rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	s.mu.Lock()
	n := 0
	for uid, u := range s.uploads {
		if time.Since(u.started) > uploadLife {
			os.RemoveAll(u.dir)
			delete(s.uploads, uid)
		} else if u.user == q.user {
			n++
		}
	}
	if n >= maxUploads {
		s.mu.Unlock()
		return s3Errf(http.StatusServiceUnavailable, "SlowDown", "%s has %d multipart uploads under way, the limit; complete or abort some", q.user, n)
	}
	meta, err := requestMeta(q.r.Header)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	u := &upload{user: q.user, bucket: q.bucket, key: q.key, dir: filepath.Join(s.spool, id), meta: meta, parts: map[int][]byte{}, started: time.Now()}
	s.uploads[id] = u
	s.mu.Unlock()
	if err := os.Mkdir(u.dir, 0o700); err != nil {
		return err
	}
	writeXML(q.w, struct {
		XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
		NS       string   `xml:"xmlns,attr"`
		Bucket   string
		Key      string
		UploadId string
	}{NS: s3XMLNS, Bucket: q.bucket, Key: q.key, UploadId: id})
	return nil
}

func (q *s3Req) uploadOp(op s3Op, vals url.Values) error {
	id := vals.Get("uploadId")
	s := q.s
	s.mu.Lock()
	u := s.uploads[id]
	d, done := s.done[id]
	s.mu.Unlock()
	if u == nil && done && op == opCompleteUpload && d.user == q.user && d.bucket == q.bucket && d.key == q.key && time.Since(d.at) <= completedLife {
		q.completed(d.etag)
		return nil
	}
	if u == nil || u.user != q.user || u.bucket != q.bucket || u.key != q.key {
		return s3Errf(http.StatusNotFound, "NoSuchUpload", "no upload %.40q of this key is under way", id)
	}
	switch op {
	case opUploadPart, opUploadPartCopy:
		n, err := strconv.Atoi(vals.Get("partNumber"))
		if err != nil || n < 1 || n > maxParts {
			return s3Errf(http.StatusBadRequest, "InvalidArgument", "partNumber must be 1 to %d", maxParts)
		}
		dst := filepath.Join(u.dir, fmt.Sprintf("part-%05d", n))
		var sum []byte
		if op == opUploadPartCopy {
			sum, err = q.copyPart(dst)
		} else {
			var sp *spooled
			if sp, err = q.spool(dst); err == nil {
				sp.f.Close() // kept until the upload ends
				sum = sp.md5
			}
		}
		if err != nil {
			return err
		}
		s.mu.Lock()
		u.parts[n] = sum
		s.mu.Unlock()
		etag := `"` + hex.EncodeToString(sum) + `"`
		if op == opUploadPartCopy {
			writeXML(q.w, struct {
				XMLName      xml.Name `xml:"CopyPartResult"`
				NS           string   `xml:"xmlns,attr"`
				LastModified string
				ETag         string
			}{NS: s3XMLNS, LastModified: s3Time(time.Now().UnixNano()), ETag: etag})
			return nil
		}
		q.w.Header().Set("ETag", etag)
		return nil
	case opAbortUpload:
		s.mu.Lock()
		delete(s.uploads, id)
		s.mu.Unlock()
		os.RemoveAll(u.dir)
		q.w.WriteHeader(http.StatusNoContent)
		return nil
	case opCompleteUpload:
		return q.complete(id, u)
	case opListParts:
		return q.listParts(id, u)
	}
	return s3Errf(http.StatusNotImplemented, "NotImplemented", "%s of an upload is not served", q.r.Method)
}

func (q *s3Req) complete(id string, u *upload) error {
	var req struct {
		Parts []struct {
			PartNumber int
			ETag       string
		} `xml:"Part"`
	}
	if err := q.readXML(&req); err != nil {
		return err
	}
	if len(req.Parts) == 0 {
		return s3Errf(http.StatusBadRequest, "MalformedXML", "no parts named")
	}
	if err := q.putPreconditions(q.path(q.key)); err != nil {
		return err
	}
	q.s.mu.Lock()
	var readers []io.Reader
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	all := md5.New()
	prev := 0
	var bad error
	for i, p := range req.Parts {
		sum, ok := u.parts[p.PartNumber]
		switch {
		case p.PartNumber <= prev:
			bad = s3Errf(http.StatusBadRequest, "InvalidPartOrder", "parts must be named in ascending order")
		case !ok || strings.Trim(p.ETag, `"`) != hex.EncodeToString(sum):
			bad = s3Errf(http.StatusBadRequest, "InvalidPart", "part %d was not uploaded with that ETag", p.PartNumber)
		}
		if bad != nil {
			break
		}
		prev = p.PartNumber
		all.Write(sum)
		f, err := os.Open(filepath.Join(u.dir, fmt.Sprintf("part-%05d", p.PartNumber)))
		if err != nil {
			bad = err
			break
		}
		if fi, err := f.Stat(); err == nil && fi.Size() < minPart && i < len(req.Parts)-1 {
			f.Close()
			bad = s3Errf(http.StatusBadRequest, "EntityTooSmall", "part %d is %d bytes; every part but the last must have at least %d", p.PartNumber, fi.Size(), minPart)
			break
		}
		files = append(files, f)
		readers = append(readers, bufio.NewReaderSize(f, 1<<20))
	}
	q.s.mu.Unlock()
	if bad != nil {
		return bad
	}
	sum := fmt.Sprintf("%s-%d", hex.EncodeToString(all.Sum(nil)), len(req.Parts))
	if err := q.write(q.path(q.key), sum, u.meta, readers...); err != nil {
		return err
	}
	q.s.mu.Lock()
	delete(q.s.uploads, id)
	for did, d := range q.s.done {
		if time.Since(d.at) > completedLife {
			delete(q.s.done, did)
		}
	}
	q.s.done[id] = completed{user: u.user, bucket: u.bucket, key: u.key, etag: `"` + sum + `"`, at: time.Now()}
	q.s.mu.Unlock()
	os.RemoveAll(u.dir)
	q.completed(`"` + sum + `"`)
	return nil
}

// completed is an upload completed lately: completing it again answers
// the same, as S3 does (a client that lost the first answer retries).
type completed struct {
	user, bucket, key, etag string
	at                      time.Time
}

// completedLife is how long a completed upload is remembered.
const completedLife = 10 * time.Minute

// completed answers CompleteMultipartUpload with the object's ETag.
func (q *s3Req) completed(etag string) {
	writeXML(q.w, struct {
		XMLName  xml.Name `xml:"CompleteMultipartUploadResult"`
		NS       string   `xml:"xmlns,attr"`
		Location string
		Bucket   string
		Key      string
		ETag     string
	}{NS: s3XMLNS, Location: "/" + q.bucket + "/" + q.key, Bucket: q.bucket, Key: q.key, ETag: etag})
}
