package web

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"pando.dev/pando/internal/vfs"
)

// S3 is the S3 front end of a gateway. Buckets are the directories
// directly below its bucket root: the domain (/<domain>/<bucket>, the
// domain's mounts) unless the administrator names a folder, below which
// users with the right make and remove buckets over S3; an object's key
// is its path below its bucket. Requests are path-style
// (https://gw/bucket/key) or, with a host suffix, virtual-host-style
// (https://bucket.suffix/key), signed with SigV4 by an access key the
// gateway maps to a user (pando serve s3-key).
type S3 struct {
	users      Users
	keys       S3Keys
	domain     string
	root       string // the bucket root, a global path
	made       bool   // buckets are made and removed over S3 (root is not the domain)
	hostSuffix string
	spool      string
	c          *Counters
	log        *slog.Logger
	now        func() time.Time

	mu      sync.Mutex
	uploads map[string]*upload
	done    map[string]completed // uploads completed lately, by id
}

// Bounds of the S3 front end.
const (
	maxObject    = 5 << 30 // a PUT or a part, as S3's
	maxParts     = 10000
	maxUploads   = 100 // multipart uploads under way per user
	maxListWalk  = 100_000
	maxS3XML     = 1 << 20
	uploadLife   = 24 * time.Hour
	s3XMLNS      = "http://s3.amazonaws.com/doc/2006-03-01/"
	s3MD5Xattr   = "user.s3.md5"
	s3OwnerXattr = "user.s3.owner" // who made a bucket over S3
	// A directory made only to hold keys below it (see prune).
	s3ImplicitXattr = "user.s3.implicit"
	emptyMD5        = "d41d8cd98f00b204e9800998ecf8427e"
	s3MaxKeyBytes   = 1024
)

// S3Options configures the S3 front end.
type S3Options struct {
	Domain     string
	HostSuffix string // take virtual-host-style requests for <bucket>.<HostSuffix>
	// Buckets is the global path of the folder whose directories are
	// the buckets, made and removed over S3 by users with the rights to
	// make and remove them there; "" for the names below the domain (its
	// mounts, not made over S3).
	Buckets string
	Spool   string // bodies and parts of uploads, emptied now
}

// NewS3 serves the buckets to the users keys names; bodies and parts of
// uploads are kept in the spool until they are checked and written.
func NewS3(users Users, keys S3Keys, o S3Options, c *Counters, log *slog.Logger) (*S3, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	root := "/" + o.Domain
	if o.Buckets != "" {
		b, err := CleanPath(o.Buckets)
		if err != nil || (b != root && !strings.HasPrefix(b, root+"/")) {
			return nil, fmt.Errorf("--buckets %q: give a global path of a folder of domain %s, e.g. /%s/s3", o.Buckets, o.Domain, o.Domain)
		}
		root = b
	}
	if err := os.RemoveAll(o.Spool); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Spool, 0o700); err != nil {
		return nil, err
	}
	return &S3{users: users, keys: keys, domain: o.Domain, root: root, made: root != "/"+o.Domain,
		hostSuffix: strings.TrimPrefix(o.HostSuffix, "."), spool: o.Spool,
		c: c, log: log, now: time.Now, uploads: make(map[string]*upload), done: make(map[string]completed)}, nil
}

// Serve serves on ln, over TLS with tc unless tc is nil.
func (s *S3) Serve(ln net.Listener, tc *tls.Config) error { return serveHTTP(s, ln, tc, s.log) }

func (s *S3) fail(w http.ResponseWriter, r *http.Request, err error) {
	var e *s3Error
	if !errors.As(err, &e) {
		e = vfsS3Error(err)
	}
	if e.Status == http.StatusForbidden {
		s.c.Refused.Add(1)
	}
	if e.Status == http.StatusNotModified {
		w.WriteHeader(e.Status) // no body
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(e.Status)
	if r.Method == http.MethodHead {
		return
	}
	b, _ := xml.Marshal(struct {
		XMLName  xml.Name `xml:"Error"`
		Code     string
		Message  string
		Resource string
	}{Code: e.Code, Message: e.Message, Resource: r.URL.Path})
	io.WriteString(w, xml.Header)
	w.Write(b)
}

// vfsS3Error is the S3 error of a vfs error.
func vfsS3Error(err error) *s3Error {
	msg := err.Error()
	switch Errno(err) {
	case syscall.ENOENT:
		return &s3Error{http.StatusNotFound, "NoSuchKey", msg}
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return &s3Error{http.StatusForbidden, "AccessDenied", msg}
	case syscall.ENOSPC, syscall.EDQUOT:
		return &s3Error{http.StatusInsufficientStorage, "InsufficientStorage", msg}
	case syscall.EHOSTUNREACH, syscall.ETIMEDOUT, syscall.EAGAIN, syscall.ENOBUFS:
		return &s3Error{http.StatusServiceUnavailable, "ServiceUnavailable", msg}
	case syscall.EEXIST, syscall.ENOTEMPTY, syscall.ENOTDIR, syscall.EISDIR:
		return &s3Error{http.StatusConflict, "InvalidRequest", msg}
	case syscall.ENAMETOOLONG:
		return &s3Error{http.StatusBadRequest, "KeyTooLongError", msg}
	}
	return &s3Error{http.StatusInternalServerError, "InternalError", msg}
}

func writeXML(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/xml")
	b, err := xml.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	io.WriteString(w, xml.Header)
	w.Write(b)
}

// checkBucket checks a bucket's name: one name of the namespace.
func checkBucket(b string) error {
	if b == "" || b == "." || b == ".." || len(b) > 255 || strings.ContainsAny(b, "/\\\x00") {
		return s3Errf(http.StatusBadRequest, "InvalidBucketName", "%.80q is not a bucket name", b)
	}
	return nil
}

// checkKey checks an object's key: a clean relative path, with a final /
// for a directory.
func checkKey(k string) error {
	if len(k) > s3MaxKeyBytes {
		return s3Errf(http.StatusBadRequest, "KeyTooLongError", "a key has at most %d bytes", s3MaxKeyBytes)
	}
	for _, name := range strings.Split(strings.TrimSuffix(k, "/"), "/") {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "\\\x00") {
			return s3Errf(http.StatusBadRequest, "InvalidArgument", "the key %.80q has an empty, . or .. name, a backslash or a NUL; such keys are not served", k)
		}
	}
	return nil
}

// target splits a request into bucket and key.
func (s *S3) target(r *http.Request) (bucket, key string, err error) {
	p := r.URL.Path
	if !strings.HasPrefix(p, "/") {
		return "", "", s3Errf(http.StatusBadRequest, "InvalidURI", "the path must begin with /")
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if s.hostSuffix != "" && strings.HasSuffix(host, "."+s.hostSuffix) {
		bucket, key = strings.TrimSuffix(host, "."+s.hostSuffix), p[1:]
	} else {
		bucket, key, _ = strings.Cut(p[1:], "/")
	}
	if bucket == "" {
		if key != "" {
			return "", "", s3Errf(http.StatusBadRequest, "InvalidBucketName", "no bucket named")
		}
		return "", "", nil
	}
	if err := checkBucket(bucket); err != nil {
		return "", "", err
	}
	if key != "" {
		if err := checkKey(key); err != nil {
			return "", "", err
		}
	}
	return bucket, key, nil
}

func (s *S3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.c.Requests.Add(1)
	user, payload, err := sigv4(r, s.keys, s.now())
	if err != nil {
		s.c.Unauthenticated.Add(1)
		s.fail(w, r, err)
		return
	}
	bucket, key, err := s.target(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	op, err := s3Classify(r, bucket, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v, err := s.users.Acquire(r.Context(), user)
	if err != nil {
		s.fail(w, r, s3Errf(http.StatusServiceUnavailable, "ServiceUnavailable", "%v", err))
		return
	}
	defer s.users.Release(user)
	q := r.URL.Query()
	rq := &s3Req{s: s, w: w, r: r, v: v, user: user, bucket: bucket, key: key, payload: payload,
		ctx: context.WithoutCancel(r.Context())}
	switch op {
	case opListBuckets:
		err = rq.listBuckets()
	case opHeadBucket, opListObjects, opListVersions, opGetBucketLocation, opGetBucketVersioning, opListUploads,
		opDeleteObjects, opCreateBucket, opDeleteBucket:
		err = rq.bucketOp(op, q)
	case opGetObject, opPutObject, opCopyObject, opDeleteObject, opInitiateUpload:
		if err = rq.haveBucket(); err == nil {
			err = rq.object(op)
		}
	case opUploadPart, opUploadPartCopy, opCompleteUpload, opAbortUpload, opListParts:
		err = rq.uploadOp(op, q)
	default:
		err = s3Errf(http.StatusNotImplemented, "NotImplemented", "%s %s is not served", r.Method, s3What(bucket, key))
	}
	if err != nil {
		s.fail(w, r, err)
	}
}

// object serves an operation on an object of a bucket that exists.
func (q *s3Req) object(op s3Op) error {
	switch op {
	case opGetObject:
		return q.get()
	case opPutObject:
		return q.put()
	case opCopyObject:
		return q.copy()
	case opDeleteObject:
		return q.delete()
	}
	return q.initiate()
}

// s3Req is one request being served.
type s3Req struct {
	s                          *S3
	w                          http.ResponseWriter
	r                          *http.Request
	v                          *vfs.FS
	ctx                        context.Context
	user, bucket, key, payload string
}

// path is the global path of key in the request's bucket.
func (q *s3Req) path(key string) string {
	return strings.TrimSuffix(path.Join(q.s.root, q.bucket, key), "/")
}

func (q *s3Req) bucketOp(op s3Op, vals url.Values) error {
	switch op {
	case opCreateBucket:
		return q.createBucket()
	case opDeleteBucket:
		return q.deleteBucket()
	}
	if err := q.haveBucket(); err != nil {
		return err
	}
	switch op {
	case opHeadBucket:
		return nil
	case opGetBucketLocation:
		writeXML(q.w, struct {
			XMLName xml.Name `xml:"LocationConstraint"`
			NS      string   `xml:"xmlns,attr"`
		}{NS: s3XMLNS})
		return nil
	case opListUploads:
		return q.listUploads(vals)
	case opGetBucketVersioning:
		writeXML(q.w, struct {
			XMLName xml.Name `xml:"VersioningConfiguration"`
			NS      string   `xml:"xmlns,attr"`
		}{NS: s3XMLNS})
		return nil
	case opListObjects, opListVersions:
		return q.list(op, vals)
	case opDeleteObjects:
		return q.deleteObjects()
	}
	return s3Errf(http.StatusNotImplemented, "NotImplemented", "%s of a bucket is not served", q.r.Method)
}

// haveBucket answers NoSuchBucket unless the request's bucket is a
// directory.
func (q *s3Req) haveBucket() error {
	a, err := q.v.GetAttr(q.ctx, q.path(""))
	if err != nil || a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		if err == nil || Errno(err) == syscall.ENOENT || Errno(err) == syscall.ENOTDIR {
			return s3Errf(http.StatusNotFound, "NoSuchBucket", "no bucket %s: buckets are the folders below %s", q.bucket, q.s.root)
		}
		return err
	}
	return nil
}

// createBucket makes a bucket: a folder below the bucket root, with the
// rights to make one there (insert), whose maker is kept in an extended
// attribute; an existing one is made again for its maker (as in S3's
// us-east-1), BucketAlreadyExists for anyone else.
func (q *s3Req) createBucket() error {
	if !q.s.made {
		if q.haveBucket() == nil {
			return s3Errf(http.StatusConflict, "BucketAlreadyOwnedByYou", "bucket %s exists; buckets are the domain's mounts, made with pando ns mount", q.bucket)
		}
		return s3Errf(http.StatusNotImplemented, "NotImplemented", "buckets are not made over S3 here: they are the domain's mounts (pando ns mount), or start the gateway with --buckets FOLDER")
	}
	if err := checkNewBucket(q.bucket); err != nil {
		return err
	}
	if err := q.readLocation(); err != nil {
		return err
	}
	_, err := q.v.Mkdir(q.ctx, q.path(""), 0o755)
	switch Errno(err) {
	case 0:
		if err := q.v.SetXattr(q.ctx, q.path(""), s3OwnerXattr, []byte(q.user), 0); err != nil {
			q.s.log.Debug("the maker of a bucket could not be kept", "bucket", q.bucket, "err", err)
		}
		q.w.Header().Set("Location", "/"+q.bucket)
		return nil
	case syscall.EEXIST:
		if b, err := q.v.GetXattr(q.ctx, q.path(""), s3OwnerXattr); err == nil && string(b) == q.user {
			// As S3 answers in us-east-1, the gateway's one region: a
			// bucket made again by its maker is made.
			q.w.Header().Set("Location", "/"+q.bucket)
			return nil
		}
		return s3Errf(http.StatusConflict, "BucketAlreadyExists", "bucket %s exists; choose another name", q.bucket)
	case syscall.EACCES, syscall.EPERM:
		if q.haveBucket() == nil {
			return s3Errf(http.StatusConflict, "BucketAlreadyExists", "bucket %s exists; choose another name", q.bucket)
		}
	case syscall.ENOENT:
		return s3Errf(http.StatusServiceUnavailable, "ServiceUnavailable", "the folder of buckets %s does not exist; its administrator must make it", q.s.root)
	}
	return err
}

// readLocation reads a CreateBucket body, if any: a location, which must
// be empty or us-east-1 (the gateway is one place).
func (q *s3Req) readLocation() error {
	if q.r.ContentLength == 0 {
		return nil
	}
	var cfg struct {
		LocationConstraint string
	}
	if err := q.readXML(&cfg); err != nil {
		return err
	}
	if cfg.LocationConstraint != "" && cfg.LocationConstraint != "us-east-1" {
		return s3Errf(http.StatusBadRequest, "InvalidLocationConstraint", "the location %.40q is not this gateway's; leave it out or give us-east-1", cfg.LocationConstraint)
	}
	return nil
}

// deleteBucket removes an empty bucket.
func (q *s3Req) deleteBucket() error {
	if !q.s.made {
		return s3Errf(http.StatusConflict, "BucketNotEmpty", "buckets are the domain's mounts, removed with pando ns unmount")
	}
	if err := q.haveBucket(); err != nil {
		return err
	}
	err := q.v.Rmdir(q.ctx, q.path(""))
	switch Errno(err) {
	case 0:
		q.w.WriteHeader(http.StatusNoContent)
		return nil
	case syscall.ENOTEMPTY, syscall.EEXIST:
		return s3Errf(http.StatusConflict, "BucketNotEmpty", "bucket %s is not empty: delete its objects first", q.bucket)
	}
	return err
}

// checkNewBucket checks the name of a bucket to be made, as S3's rules
// for new buckets have it: 3 to 63 lower-case letters, digits, dots and
// hyphens, beginning and ending with a letter or digit, not like an IP
// address.
func checkNewBucket(b string) error {
	bad := s3Errf(http.StatusBadRequest, "InvalidBucketName", "%.80q is not a bucket name: 3 to 63 lower-case letters, digits, '.' and '-', beginning and ending with a letter or digit", b)
	if len(b) < 3 || len(b) > 63 || strings.Contains(b, "..") || strings.Contains(b, ".-") || strings.Contains(b, "-.") {
		return bad
	}
	for i, c := range b {
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && ((i == 0 || i == len(b)-1) || (c != '.' && c != '-')) {
			return bad
		}
	}
	if net.ParseIP(b) != nil {
		return bad
	}
	return nil
}

// spooled is a request body kept in the spool, checked against the hash
// the client signed and its Content-MD5.
type spooled struct {
	f    *os.File
	size int64
	md5  []byte
}

func (sp *spooled) Close() {
	sp.f.Close()
	os.Remove(sp.f.Name())
}

// spool reads the body into the spool directory, whole and checked,
// before anything is written through the vfs.
func (q *s3Req) spool(dst string) (*spooled, error) {
	var body io.Reader = q.r.Body
	switch q.payload {
	case streamingUnsignedTrailer:
		body = newChunkedReader(q.r.Body)
	case "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD":
		return nil, s3Errf(http.StatusNotImplemented, "NotImplemented", "signed chunked bodies are not served; send the body's SHA-256 or UNSIGNED-PAYLOAD over TLS")
	}
	var f *os.File
	var err error
	if dst == "" {
		f, err = os.CreateTemp(q.s.spool, "put-")
	} else {
		f, err = os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	}
	if err != nil {
		return nil, err
	}
	sp := &spooled{f: f}
	hs, hm := sha256.New(), md5.New()
	n, err := io.Copy(io.MultiWriter(f, hs, hm), io.LimitReader(body, maxObject+1))
	if err != nil {
		sp.Close()
		return nil, s3Errf(http.StatusBadRequest, "IncompleteBody", "the body could not be read: %v", err)
	}
	if n > maxObject {
		sp.Close()
		return nil, s3Errf(http.StatusBadRequest, "EntityTooLarge", "an object or part has at most %d bytes; send larger ones in a multipart upload", int64(maxObject))
	}
	sp.size, sp.md5 = n, hm.Sum(nil)
	if len(q.payload) == 64 && !strings.EqualFold(q.payload, hex.EncodeToString(hs.Sum(nil))) {
		sp.Close()
		return nil, s3Errf(http.StatusBadRequest, "XAmzContentSHA256Mismatch", "the body's SHA-256 is not the one signed")
	}
	if cm := q.r.Header.Get("Content-Md5"); cm != "" && cm != base64.StdEncoding.EncodeToString(sp.md5) {
		sp.Close()
		return nil, s3Errf(http.StatusBadRequest, "BadDigest", "the body's MD5 is not the Content-MD5 given")
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		sp.Close()
		return nil, err
	}
	return sp, nil
}

// readXML reads a small XML body (signed like any other) into v.
func (q *s3Req) readXML(v any) error {
	sp, err := q.spool("")
	if err != nil {
		return err
	}
	defer sp.Close()
	if sp.size > maxS3XML {
		return s3Errf(http.StatusBadRequest, "MalformedXML", "the XML body is longer than %d bytes", maxS3XML)
	}
	if err := xml.NewDecoder(sp.f).Decode(v); err != nil {
		return s3Errf(http.StatusBadRequest, "MalformedXML", "the XML body is malformed: %v", err)
	}
	return nil
}

func s3Time(ns int64) string { return time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05.000Z") }
