package web

import (
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
)

// What the S3 front end serves, as an allow-list: every request is named
// as one S3 operation by its method, its target (the service, a bucket or
// an object), its sub-resources and the headers that change what it does,
// before anything reaches the vfs. A request with a sub-resource, a query
// parameter or such a header that the operation does not take is refused
// with 501 NotImplemented (or S3's own error where S3 has one), never read
// as a plain read or write of the object: a PUT ?acl taken as a PutObject
// would empty the object, a DELETE ?tagging would delete it.

// s3Op is an operation the front end serves.
type s3Op int

const (
	opListBuckets s3Op = iota + 1
	opHeadBucket
	opListObjects
	opGetBucketLocation
	opGetBucketVersioning
	opListUploads
	opDeleteObjects
	opCreateBucket
	opDeleteBucket
	opGetObject // and HeadObject
	opPutObject
	opCopyObject
	opDeleteObject
	opInitiateUpload
	opUploadPart
	opUploadPartCopy
	opCompleteUpload
	opAbortUpload
	opListParts
	opListVersions
)

// Query parameters every operation takes: x-id is the operation's name,
// which the AWS SDKs add to each request; the X-Amz-* of a presigned URL.
var s3CommonParams = []string{"x-id", "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders",
	"X-Amz-Signature", "X-Amz-Security-Token", "X-Amz-Content-Sha256"}

// The query parameters each operation takes, besides the common ones.
var s3OpParams = map[s3Op][]string{
	opListBuckets:         {"max-buckets", "continuation-token", "prefix", "bucket-region"},
	opListVersions:        {"versions", "prefix", "delimiter", "encoding-type", "max-keys", "key-marker", "version-id-marker"},
	opListObjects:         {"list-type", "prefix", "delimiter", "encoding-type", "max-keys", "marker", "continuation-token", "start-after", "fetch-owner"},
	opListUploads:         {"uploads", "prefix", "delimiter", "encoding-type", "max-uploads", "key-marker", "upload-id-marker"},
	opGetObject:           {"versionId", "response-content-type", "response-content-language", "response-expires", "response-cache-control", "response-content-disposition", "response-content-encoding"},
	opDeleteObject:        {"versionId"},
	opDeleteObjects:       {"delete"},
	opGetBucketLocation:   {"location"},
	opGetBucketVersioning: {"versioning"},
	opInitiateUpload:      {"uploads"},
	opUploadPart:          {"uploadId", "partNumber"},
	opUploadPartCopy:      {"uploadId", "partNumber"},
	opCompleteUpload:      {"uploadId"},
	opAbortUpload:         {"uploadId"},
	opListParts:           {"uploadId", "max-parts", "part-number-marker", "encoding-type"},
}

// Request headers that ask for something the front end does not do; a
// request that carries one is refused whatever its operation (an object
// written unencrypted, unlocked or without its tags when the client asked
// otherwise would be a silent surprise; an append taken as a PUT would
// replace the object).
var s3RefusedHeaders = []struct{ name, why string }{
	{"X-Amz-Server-Side-Encryption", "server-side encryption is not served; the share keeps the bytes as sent"},
	{"X-Amz-Server-Side-Encryption-Customer-Algorithm", "server-side encryption with customer keys is not served"},
	{"X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id", "server-side encryption is not served"},
	{"X-Amz-Copy-Source-Server-Side-Encryption-Customer-Algorithm", "server-side encryption with customer keys is not served"},
	{"X-Amz-Object-Lock-Mode", "object lock is not served"},
	{"X-Amz-Object-Lock-Retain-Until-Date", "object lock is not served"},
	{"X-Amz-Object-Lock-Legal-Hold", "object lock is not served"},
	{"X-Amz-Tagging", "object tags are not kept"},
	{"X-Amz-Website-Redirect-Location", "website redirects are not served"},
	{"X-Amz-Write-Offset-Bytes", "appending to an object is not served"},
	{"X-Amz-Grant-Read", "grants are pando's ACLs (pando acl set), not set over S3"},
	{"X-Amz-Grant-Write", "grants are pando's ACLs (pando acl set), not set over S3"},
	{"X-Amz-Grant-Read-Acp", "grants are pando's ACLs (pando acl set), not set over S3"},
	{"X-Amz-Grant-Write-Acp", "grants are pando's ACLs (pando acl set), not set over S3"},
	{"X-Amz-Grant-Full-Control", "grants are pando's ACLs (pando acl set), not set over S3"},
	{"X-Amz-Mfa", "MFA delete is not served"},
}

// s3Classify names the operation r asks for, or refuses it.
func s3Classify(r *http.Request, bucket, key string) (s3Op, error) {
	q := r.URL.Query()
	has := func(k string) bool { _, ok := q[k]; return ok }
	var op s3Op
	switch {
	case bucket == "":
		if r.Method == http.MethodGet {
			op = opListBuckets
		}
	case key == "":
		op = s3BucketOp(r.Method, has)
	default:
		op = s3ObjectOp(r, has)
	}
	if op == 0 {
		return 0, s3Unsupported(r, bucket, key, q)
	}
	allowed := append(slices.Clone(s3CommonParams), s3OpParams[op]...)
	for _, k := range sortedKeys(q) {
		if !slices.Contains(allowed, k) {
			return 0, s3Errf(http.StatusNotImplemented, "NotImplemented", "the query parameter %.40q is not served with %s %s; nothing was done", k, r.Method, s3What(bucket, key))
		}
	}
	for _, h := range s3RefusedHeaders {
		if r.Header.Get(h.name) != "" {
			return 0, s3Errf(http.StatusNotImplemented, "NotImplemented", "%s (the request has %s); nothing was done", h.why, h.name)
		}
	}
	if err := s3CheckHeaders(r, op); err != nil {
		return 0, err
	}
	return op, nil
}

func s3BucketOp(method string, has func(string) bool) s3Op {
	switch method {
	case http.MethodHead:
		return opHeadBucket
	case http.MethodGet:
		switch {
		case has("location"):
			return opGetBucketLocation
		case has("versioning"):
			return opGetBucketVersioning
		case has("uploads"):
			return opListUploads
		case has("versions"):
			return opListVersions
		case !hasSubresource(has):
			return opListObjects
		}
	case http.MethodPost:
		if has("delete") {
			return opDeleteObjects
		}
	case http.MethodPut:
		if !hasSubresource(has) {
			return opCreateBucket
		}
	case http.MethodDelete:
		if !hasSubresource(has) {
			return opDeleteBucket
		}
	}
	return 0
}

func s3ObjectOp(r *http.Request, has func(string) bool) s3Op {
	copySrc := r.Header.Get("X-Amz-Copy-Source") != ""
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		switch {
		case has("uploadId") && r.Method == http.MethodGet:
			return opListParts
		case !hasSubresource(has):
			return opGetObject
		}
	case http.MethodPut:
		switch {
		case has("uploadId") && has("partNumber") && copySrc:
			return opUploadPartCopy
		case has("uploadId") && has("partNumber"):
			return opUploadPart
		case hasSubresource(has):
		case copySrc:
			return opCopyObject
		default:
			return opPutObject
		}
	case http.MethodDelete:
		switch {
		case has("uploadId"):
			return opAbortUpload
		case !hasSubresource(has):
			return opDeleteObject
		}
	case http.MethodPost:
		switch {
		case has("uploads"):
			return opInitiateUpload
		case has("uploadId"):
			return opCompleteUpload
		}
	}
	return 0
}

// hasSubresource reports whether the query names a sub-resource or a
// parameter that is not a plain read's, write's or delete's.
func hasSubresource(has func(string) bool) bool {
	for _, k := range []string{"acl", "tagging", "attributes", "retention", "legal-hold", "torrent", "restore", "select",
		"select-type", "uploads", "uploadId", "partNumber", "policy", "policyStatus", "cors", "lifecycle", "website", "logging",
		"encryption", "versioning", "versions", "location", "replication", "notification", "requestPayment", "object-lock",
		"ownershipControls", "publicAccessBlock", "accelerate", "intelligent-tiering", "inventory", "metrics", "analytics",
		"delete", "append", "renameObject", "metadataTable", "session"} {
		if has(k) {
			return true
		}
	}
	return false
}

// s3Unsupported is the refusal of a request that names no served
// operation.
func s3Unsupported(r *http.Request, bucket, key string, q url.Values) error {
	sub := ""
	for _, k := range sortedKeys(q) {
		if !slices.Contains(s3CommonParams, k) {
			sub = k
			break
		}
	}
	what := s3What(bucket, key)
	switch {
	case sub == "acl" || strings.HasPrefix(sub, "policy"):
		return s3Errf(http.StatusNotImplemented, "NotImplemented", "%s ?%s is not served: who may do what is pando's ACLs (pando acl get/set); nothing was done", r.Method, sub)
	case sub != "":
		return s3Errf(http.StatusNotImplemented, "NotImplemented", "%s %s?%s is not served; nothing was done", r.Method, what, sub)
	case bucket == "":
		return s3Errf(http.StatusMethodNotAllowed, "MethodNotAllowed", "%s of the service is not served", r.Method)
	}
	return s3Errf(http.StatusNotImplemented, "NotImplemented", "%s of %s is not served; nothing was done", r.Method, what)
}

// s3CheckHeaders refuses the headers op does not take, and the values of
// those it takes in part.
func s3CheckHeaders(r *http.Request, op s3Op) error {
	h := r.Header
	writes := op == opPutObject || op == opCopyObject || op == opInitiateUpload
	if acl := h.Get("X-Amz-Acl"); acl != "" && acl != "private" && acl != "bucket-owner-full-control" {
		return s3Errf(http.StatusNotImplemented, "NotImplemented", "the canned ACL %.40q is not served: who may read is pando's ACLs (pando acl set); nothing was done", acl)
	}
	if sc := h.Get("X-Amz-Storage-Class"); sc != "" && sc != "STANDARD" {
		return s3Errf(http.StatusNotImplemented, "NotImplemented", "the storage class %.40q is not served; objects are STANDARD", sc)
	}
	if !writes && op != opUploadPart && op != opUploadPartCopy && h.Get("X-Amz-Copy-Source") != "" {
		return s3Errf(http.StatusBadRequest, "InvalidArgument", "x-amz-copy-source is taken only by CopyObject and UploadPartCopy")
	}
	if h.Get("X-Amz-Copy-Source-Range") != "" && op != opUploadPartCopy {
		return s3Errf(http.StatusBadRequest, "InvalidArgument", "x-amz-copy-source-range is taken only by UploadPartCopy")
	}
	if h.Get("Content-Range") != "" && (op == opPutObject || op == opUploadPart) {
		return s3Errf(http.StatusNotImplemented, "NotImplemented", "a PUT with Content-Range is not served: a PUT replaces a whole object; send parts in a multipart upload")
	}
	if d := h.Get("X-Amz-Metadata-Directive"); d != "" && d != "COPY" && d != "REPLACE" {
		return s3Errf(http.StatusBadRequest, "InvalidArgument", "x-amz-metadata-directive must be COPY or REPLACE")
	}
	if v := r.URL.Query().Get("versionId"); (op == opGetObject || op == opDeleteObject) && r.URL.Query().Has("versionId") && v != "null" {
		return s3Errf(http.StatusNotImplemented, "NotImplemented", "versions are not kept: only versionId=null (the object itself) is served")
	}
	return nil
}

// s3What names a request's target in a message.
func s3What(bucket, key string) string {
	switch {
	case bucket == "":
		return "the service"
	case key == "":
		return "bucket " + bucket
	}
	return "object " + bucket + "/" + key
}

func sortedKeys(q url.Values) []string {
	ks := make([]string, 0, len(q))
	for k := range q {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
