package gateway

import (
	"context"
	"encoding/hex"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"golang.org/x/sys/unix"

	"pando.dev/pando/internal/testenv"
)

// TestS3NotServedChangesNothing: each request the S3 front end does not
// serve (sub-resources of objects and buckets, headers that ask for what
// is not done, conditions that do not hold) is refused with S3's error,
// and the share's bytes are the same after it: none is taken as a plain
// read, write or delete of the object it names.
func TestS3NotServedChangesNothing(t *testing.T) {
	e := newEnv(t, false)
	e.startS3(t)
	content := []byte("the object's bytes, which no refused request may change\n")
	os.WriteFile(filepath.Join(e.root, "obj.txt"), content, 0o644)
	os.Mkdir(filepath.Join(e.root, "dir"), 0o755)
	os.WriteFile(filepath.Join(e.root, "dir", "in.txt"), []byte("inside"), 0o644)
	outside := filepath.Dir(e.root)
	before, beforeOut := testenv.Tree(t, e.root), exports(testenv.Tree(t, outside))
	alice := e.s3keys["alice"]
	now := time.Now()
	tagging := []byte(`<Tagging><TagSet><Tag><Key>k</Key><Value>v</Value></Tag></TagSet></Tagging>`)
	acl := []byte(`<AccessControlPolicy><Owner><ID>alice</ID></Owner><AccessControlList/></AccessControlPolicy>`)
	retention := []byte(`<Retention><Mode>GOVERNANCE</Mode><RetainUntilDate>2030-01-01T00:00:00Z</RetainUntilDate></Retention>`)
	wrongETag := `"` + hex.EncodeToString(md5sum([]byte("not the content"))) + `"`
	_, _, h := e.s3DoH(t, "HEAD", "/data/obj.txt", alice[0], alice[1], nil, "", now)
	rightETag := h.Get("ETag")
	if rightETag == "" {
		t.Fatal("HEAD of the object gave no ETag")
	}

	for _, c := range []struct {
		name, method, path string
		body               []byte
		hdr                []string
		want               int
		code               string
	}{
		// The rows that destroyed data before: a setting's request taken
		// as a write or a delete of the object.
		{"PutObjectAcl", "PUT", "/data/obj.txt?acl", nil, []string{"X-Amz-Acl", "private"}, 501, "NotImplemented"},
		{"PutObjectAcl with a body", "PUT", "/data/obj.txt?acl", acl, nil, 501, "NotImplemented"},
		{"PutObjectTagging", "PUT", "/data/obj.txt?tagging", tagging, nil, 501, "NotImplemented"},
		{"PutObjectRetention", "PUT", "/data/obj.txt?retention", retention, nil, 501, "NotImplemented"},
		{"PutObjectLegalHold", "PUT", "/data/obj.txt?legal-hold", []byte(`<LegalHold><Status>ON</Status></LegalHold>`), nil, 501, "NotImplemented"},
		{"DeleteObjectTagging", "DELETE", "/data/obj.txt?tagging", nil, nil, 501, "NotImplemented"},
		// Reads of settings, answered before with the object's bytes.
		{"GetObjectAcl", "GET", "/data/obj.txt?acl", nil, nil, 501, "NotImplemented"},
		{"GetObjectTagging", "GET", "/data/obj.txt?tagging", nil, nil, 501, "NotImplemented"},
		{"GetObjectAttributes", "GET", "/data/obj.txt?attributes", nil, []string{"X-Amz-Object-Attributes", "ETag"}, 501, "NotImplemented"},
		{"GetObjectRetention", "GET", "/data/obj.txt?retention", nil, nil, 501, "NotImplemented"},
		{"GetObjectLegalHold", "GET", "/data/obj.txt?legal-hold", nil, nil, 501, "NotImplemented"},
		{"GetObjectTorrent", "GET", "/data/obj.txt?torrent", nil, nil, 501, "NotImplemented"},
		{"RestoreObject", "POST", "/data/obj.txt?restore", []byte(`<RestoreRequest><Days>1</Days></RestoreRequest>`), nil, 501, "NotImplemented"},
		{"SelectObjectContent", "POST", "/data/obj.txt?select&select-type=2", []byte(`<SelectObjectContentRequest/>`), nil, 501, "NotImplemented"},
		{"an unknown parameter on a PUT", "PUT", "/data/obj.txt?newthing=1", []byte("x"), nil, 501, "NotImplemented"},
		{"an unknown parameter on a DELETE", "DELETE", "/data/obj.txt?whatever", nil, nil, 501, "NotImplemented"},
		{"a part number without an upload", "PUT", "/data/obj.txt?partNumber=1", []byte("x"), nil, 501, "NotImplemented"},
		{"a version not kept", "DELETE", "/data/obj.txt?versionId=3HL4kqtJlcpXroDTDmjVBH40Nrjfkd", nil, nil, 501, "NotImplemented"},
		{"GET a version not kept", "GET", "/data/obj.txt?versionId=3HL4kqtJlcpXroDTDmjVBH40Nrjfkd", nil, nil, 501, "NotImplemented"},
		// Headers that ask for what is not done.
		{"an append", "PUT", "/data/obj.txt", []byte("appended"), []string{"X-Amz-Write-Offset-Bytes", "57"}, 501, "NotImplemented"},
		{"a PUT of a range", "PUT", "/data/obj.txt", []byte("patch"), []string{"Content-Range", "bytes 0-4/57"}, 501, "NotImplemented"},
		{"server-side encryption", "PUT", "/data/obj.txt", []byte("secret"), []string{"X-Amz-Server-Side-Encryption", "AES256"}, 501, "NotImplemented"},
		{"object lock", "PUT", "/data/obj.txt", []byte("locked"), []string{"X-Amz-Object-Lock-Mode", "GOVERNANCE"}, 501, "NotImplemented"},
		{"tags on a PUT", "PUT", "/data/obj.txt", []byte("tagged"), []string{"X-Amz-Tagging", "k=v"}, 501, "NotImplemented"},
		{"metadata past 2 KB", "PUT", "/data/obj.txt", []byte("big"), []string{"X-Amz-Meta-Big", strings.Repeat("m", 2100)}, 400, "MetadataTooLarge"},
		{"a public ACL", "PUT", "/data/obj.txt", []byte("public"), []string{"X-Amz-Acl", "public-read"}, 501, "NotImplemented"},
		{"a grant", "PUT", "/data/obj.txt", []byte("granted"), []string{"X-Amz-Grant-Read", "id=bob"}, 501, "NotImplemented"},
		// Conditions that do not hold change nothing.
		{"If-None-Match: * over an object", "PUT", "/data/obj.txt", []byte("over"), []string{"If-None-Match", "*"}, 412, "PreconditionFailed"},
		{"If-Match of another version", "PUT", "/data/obj.txt", []byte("over"), []string{"If-Match", wrongETag}, 412, "PreconditionFailed"},
		{"If-Match of a missing object", "PUT", "/data/new.txt", []byte("new"), []string{"If-Match", wrongETag}, 404, "NoSuchKey"},
		{"DELETE If-Match of another version", "DELETE", "/data/obj.txt", nil, []string{"If-Match", wrongETag}, 412, "PreconditionFailed"},
		{"copy onto itself", "PUT", "/data/obj.txt", nil, []string{"X-Amz-Copy-Source", "/data/obj.txt"}, 400, "InvalidRequest"},
		{"copy if the source matches another version", "PUT", "/data/copy.txt", nil, []string{"X-Amz-Copy-Source", "/data/obj.txt", "X-Amz-Copy-Source-If-Match", wrongETag}, 412, "PreconditionFailed"},
		{"copy if the source does not match its version", "PUT", "/data/copy.txt", nil, []string{"X-Amz-Copy-Source", "/data/obj.txt", "X-Amz-Copy-Source-If-None-Match", rightETag}, 412, "PreconditionFailed"},
		{"copy with a range", "PUT", "/data/copy.txt", nil, []string{"X-Amz-Copy-Source", "/data/obj.txt", "X-Amz-Copy-Source-Range", "bytes=0-3"}, 400, "InvalidArgument"},
		// Bucket settings.
		{"PutBucketAcl", "PUT", "/data?acl", acl, nil, 501, "NotImplemented"},
		{"PutBucketVersioning", "PUT", "/data?versioning", []byte(`<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>`), nil, 501, "NotImplemented"},
		{"PutBucketCors", "PUT", "/data?cors", []byte(`<CORSConfiguration/>`), nil, 501, "NotImplemented"},
		{"GetBucketReplication", "GET", "/data?replication", nil, nil, 501, "NotImplemented"},
		{"GetBucketAcl", "GET", "/data?acl", nil, nil, 501, "NotImplemented"},
		{"DeleteBucketCors", "DELETE", "/data?cors", nil, nil, 501, "NotImplemented"},
		{"DeleteBucketPolicy", "DELETE", "/data?policy", nil, nil, 501, "NotImplemented"},
		{"GetObjectLockConfiguration", "GET", "/data?object-lock", nil, nil, 501, "NotImplemented"},
		{"POST to a bucket", "POST", "/data", []byte("form"), nil, 501, "NotImplemented"},
		{"POST to an object", "POST", "/data/obj.txt", []byte("x"), nil, 501, "NotImplemented"},
	} {
		code, out := e.s3Do(t, c.method, c.path, alice[0], alice[1], c.body, "", now, c.hdr...)
		if code != c.want || (c.method != "HEAD" && !strings.Contains(out, "<Code>"+c.code+"</Code>")) {
			t.Errorf("%s (%s %s): %d %s, want %d %s", c.name, c.method, c.path, code, out, c.want, c.code)
		}
		if b, err := os.ReadFile(filepath.Join(e.root, "obj.txt")); err != nil || string(b) != string(content) {
			t.Fatalf("after %s the share holds %q (%v)", c.name, b, err)
		}
	}
	sameTree(t, "the share", before, testenv.Tree(t, e.root))
	sameTree(t, "beside the share", beforeOut, exports(testenv.Tree(t, outside)))

	// What is served still is: the conditions that hold, and the
	// response-* parameters of a GET.
	if code, out := e.s3Do(t, "PUT", "/data/obj.txt", alice[0], alice[1], []byte("v2"), "", now, "If-Match", rightETag); code != 200 {
		t.Errorf("PUT If-Match of the object's version: %d %s", code, out)
	}
	if code, out := e.s3Do(t, "PUT", "/data/fresh.txt", alice[0], alice[1], []byte("fresh"), "", now, "If-None-Match", "*"); code != 200 {
		t.Errorf("PUT If-None-Match: * of a new key: %d %s", code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(e.root, "obj.txt")); string(b) != "v2" {
		t.Errorf("the conditional PUT that holds left %q", b)
	}
	freshETag := ""
	if _, _, h := e.s3DoH(t, "HEAD", "/data/fresh.txt", alice[0], alice[1], nil, "", now); h != nil {
		freshETag = h.Get("ETag")
	}
	for _, c := range []struct {
		hdr  []string
		want int
		code string
	}{
		{[]string{"If-Match", wrongETag}, 412, "PreconditionFailed"},
		{[]string{"If-None-Match", freshETag}, 304, ""},
		{[]string{"If-Unmodified-Since", "Mon, 01 Jan 2001 00:00:00 GMT"}, 412, "PreconditionFailed"},
		{[]string{"If-Modified-Since", "Mon, 01 Jan 2100 00:00:00 GMT"}, 304, ""},
		{[]string{"Range", "bytes=100-200"}, 416, "InvalidRange"},
	} {
		code, out := e.s3Do(t, "GET", "/data/fresh.txt", alice[0], alice[1], nil, "", now, c.hdr...)
		if code != c.want || (c.code != "" && !strings.Contains(out, "<Code>"+c.code+"</Code>")) || (c.code == "" && out != "") {
			t.Errorf("GET with %v: %d %q, want %d %s", c.hdr, code, out, c.want, c.code)
		}
	}
	// Completing an upload again answers as the first time did.
	code, out := e.s3Do(t, "POST", "/data/twice.bin?uploads", alice[0], alice[1], nil, "", now)
	id := between(out, "<UploadId>", "</UploadId>")
	e.s3Do(t, "PUT", "/data/twice.bin?partNumber=1&uploadId="+id, alice[0], alice[1], []byte("once"), "", now)
	complete := []byte(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"` + hex.EncodeToString(md5sum([]byte("once"))) + `"</ETag></Part></CompleteMultipartUpload>`)
	code1, out1 := e.s3Do(t, "POST", "/data/twice.bin?uploadId="+id, alice[0], alice[1], complete, "", now)
	code2, out2 := e.s3Do(t, "POST", "/data/twice.bin?uploadId="+id, alice[0], alice[1], complete, "", now)
	if code != 200 || code1 != 200 || code2 != 200 || between(out1, "<ETag>", "</ETag>") != between(out2, "<ETag>", "</ETag>") {
		t.Errorf("completing an upload twice: %d %d %s, then %d %s", code, code1, out1, code2, out2)
	}
	if code, out := e.s3Do(t, "POST", "/data/twice.bin?uploadId="+id, e.s3keys["bob"][0], e.s3keys["bob"][1], complete, "", now); code != 404 {
		t.Errorf("bob completes alice's completed upload: %d %s", code, out)
	}
	code, body, hdr := e.s3DoH(t, "GET", "/data/fresh.txt?response-content-disposition=attachment&response-content-type=text%2Fplain", alice[0], alice[1], nil, "", now)
	if code != 200 || body != "fresh" || hdr.Get("Content-Type") != "text/plain" || hdr.Get("Content-Disposition") != "attachment" {
		t.Errorf("GET with response-* parameters: %d %q %v", code, body, hdr)
	}
}

// TestS3UploadPartCopy: parts copied from objects (whole and by range)
// and parts sent make one object, byte for byte; ListParts and
// ListMultipartUploads show the upload under way, and only to its
// initiator.
func TestS3UploadPartCopy(t *testing.T) {
	e := newEnv(t, false)
	e.startS3(t)
	src := filepath.Join(e.root, "src.bin")
	testenv.MakeFile(t, src, 6<<20+5)
	srcBytes, _ := os.ReadFile(src)
	alice, bob := e.s3keys["alice"], e.s3keys["bob"]
	now := time.Now()
	code, out := e.s3Do(t, "POST", "/data/joined.bin?uploads", alice[0], alice[1], nil, "", now)
	id := between(out, "<UploadId>", "</UploadId>")
	if code != 200 || id == "" {
		t.Fatalf("initiate: %d %s", code, out)
	}
	code, out = e.s3Do(t, "PUT", "/data/joined.bin?partNumber=1&uploadId="+id, alice[0], alice[1], nil, "", now, "X-Amz-Copy-Source", "/data/src.bin")
	etag1 := strings.ReplaceAll(between(out, "<ETag>", "</ETag>"), "&#34;", `"`)
	if code != 200 || !strings.Contains(out, "<CopyPartResult") || etag1 != `"`+hex.EncodeToString(md5sum(srcBytes))+`"` {
		t.Fatalf("UploadPartCopy of the whole source: %d %s", code, out)
	}
	code, out = e.s3Do(t, "PUT", "/data/joined.bin?partNumber=2&uploadId="+id, alice[0], alice[1], nil, "", now,
		"X-Amz-Copy-Source", "/data/src.bin", "X-Amz-Copy-Source-Range", "bytes=10-19")
	etag2 := strings.ReplaceAll(between(out, "<ETag>", "</ETag>"), "&#34;", `"`)
	if code != 200 || etag2 != `"`+hex.EncodeToString(md5sum(srcBytes[10:20]))+`"` {
		t.Fatalf("UploadPartCopy of a range: %d %s", code, out)
	}
	code, out = e.s3Do(t, "PUT", "/data/joined.bin?partNumber=3&uploadId="+id, alice[0], alice[1], nil, "", now,
		"X-Amz-Copy-Source", "/data/src.bin", "X-Amz-Copy-Source-Range", "bytes=10-99999999")
	if code != 416 || !strings.Contains(out, "<Code>InvalidRange</Code>") {
		t.Errorf("UploadPartCopy of a range past the end: %d %s", code, out)
	}
	if code, out = e.s3Do(t, "GET", "/data/joined.bin?uploadId="+id, alice[0], alice[1], nil, "", now); code != 200 ||
		strings.Count(out, "<Part>") != 2 || !strings.Contains(out, "<Size>10</Size>") {
		t.Errorf("ListParts: %d %s", code, out)
	}
	if code, out = e.s3Do(t, "GET", "/data?uploads", alice[0], alice[1], nil, "", now); code != 200 || !strings.Contains(out, "<UploadId>"+id+"</UploadId>") {
		t.Errorf("ListMultipartUploads as alice: %d %s", code, out)
	}
	if code, out = e.s3Do(t, "GET", "/data?uploads", bob[0], bob[1], nil, "", now); code != 200 || strings.Contains(out, id) {
		t.Errorf("ListMultipartUploads as bob shows alice's upload: %d %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(e.root, "joined.bin")); err == nil {
		t.Fatal("the object exists before the upload is complete")
	}
	complete := []byte(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>` + etag1 + `</ETag></Part><Part><PartNumber>2</PartNumber><ETag>` + etag2 + `</ETag></Part></CompleteMultipartUpload>`)
	if code, out = e.s3Do(t, "POST", "/data/joined.bin?uploadId="+id, alice[0], alice[1], complete, "", now); code != 200 {
		t.Fatalf("complete: %d %s", code, out)
	}
	got, _ := os.ReadFile(filepath.Join(e.root, "joined.bin"))
	want := append(append([]byte{}, srcBytes...), srcBytes[10:20]...)
	if string(got) != string(want) {
		t.Errorf("the object made of copied parts is %d bytes, not the %d copied", len(got), len(want))
	}
	testenv.SameFile(t, src, filepath.Join(e.root, "src.bin"))
}

// TestS3Boto3NotServed: boto3's calls that destroyed objects before
// (put_object_acl emptied one, put_object_tagging replaced it by its XML,
// delete_object_tagging deleted it, get_object_acl read its bytes as an
// answer) are refused, the object is unchanged at the share, and
// upload_part_copy copies.
func TestS3Boto3NotServed(t *testing.T) {
	needBoto3(t)
	e := newEnv(t, false)
	e.startS3(t)
	content := "the object's bytes\n"
	os.WriteFile(filepath.Join(e.root, "obj.txt"), []byte(content), 0o644)
	script, _ := filepath.Abs(filepath.Join("testdata", "boto3_notserved.py"))
	k := e.s3keys["alice"]
	out, err := exec.Command("python3", script, e.s3url, e.cacert, k[0], k[1], filepath.Join(e.root, "obj.txt")).CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "ok\n") {
		t.Fatalf("boto3: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(e.root, "obj.txt")); string(b) != content {
		t.Errorf("the share holds %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(e.root, "copied.txt")); string(b) != content {
		t.Errorf("upload_part_copy made %q", b)
	}
}

// TestS3Buckets: with --buckets, users with the right make and remove
// buckets over S3 (folders below the folder named); a bad name, a user
// without the right, a bucket not empty and one that exists are refused
// with S3's errors, and nothing changes; objects of a missing bucket are
// NoSuchBucket; ListObjectVersions lists each object as its one version.
func TestS3Buckets(t *testing.T) {
	e := newEnv(t, false)
	os.Mkdir(filepath.Join(e.root, "s3"), 0o755)
	e.startS3Buckets(t, "/d/data/s3", false)
	alice, bob := e.s3keys["alice"], e.s3keys["bob"]
	now := time.Now()
	do := func(key [2]string, method, p string, body []byte, hdr ...string) (int, string) {
		t.Helper()
		return e.s3Do(t, method, p, key[0], key[1], body, "", now, hdr...)
	}
	if code, out := do(alice, "PUT", "/mybucket", nil); code != 200 {
		t.Fatalf("alice makes a bucket: %d %s", code, out)
	}
	if fi, err := os.Stat(filepath.Join(e.root, "s3", "mybucket")); err != nil || !fi.IsDir() {
		t.Fatalf("the bucket is not a folder at the share: %v", err)
	}
	if code, out := do(alice, "PUT", "/mybucket", nil); code != 200 {
		t.Errorf("alice makes her bucket again (S3's us-east-1 answers 200): %d %s", code, out)
	}
	loc := []byte(`<CreateBucketConfiguration><LocationConstraint>us-east-1</LocationConstraint></CreateBucketConfiguration>`)
	if code, out := do(alice, "PUT", "/second", loc); code != 200 {
		t.Errorf("alice makes a bucket in us-east-1: %d %s", code, out)
	}
	before := testenv.Tree(t, e.root)
	for _, c := range []struct {
		name         string
		key          [2]string
		method, path string
		body         []byte
		want         int
		code         string
	}{
		{"bob, another's", bob, "PUT", "/mybucket", nil, 409, "BucketAlreadyExists"},
		{"bob, a new one", bob, "PUT", "/bobs", nil, 403, "AccessDenied"},
		{"upper case", alice, "PUT", "/MyBucket", nil, 400, "InvalidBucketName"},
		{"too short", alice, "PUT", "/ab", nil, 400, "InvalidBucketName"},
		{"an address", alice, "PUT", "/192.168.5.4", nil, 400, "InvalidBucketName"},
		{"a dash at the end", alice, "PUT", "/bucket-", nil, 400, "InvalidBucketName"},
		{"another region", alice, "PUT", "/third", []byte(`<CreateBucketConfiguration><LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>`), 400, "InvalidLocationConstraint"},
		{"a PUT into a missing bucket", alice, "PUT", "/nothere/x.txt", []byte("x"), 404, "NoSuchBucket"},
		{"a GET from a missing bucket", alice, "GET", "/nothere/x.txt", nil, 404, "NoSuchBucket"},
		{"a listing of a missing bucket", alice, "GET", "/nothere", nil, 404, "NoSuchBucket"},
		{"removing a missing bucket", alice, "DELETE", "/nothere", nil, 404, "NoSuchBucket"},
		{"bob removes alice's", bob, "DELETE", "/second", nil, 403, "AccessDenied"},
	} {
		code, out := do(c.key, c.method, c.path, c.body)
		if code != c.want || !strings.Contains(out, "<Code>"+c.code+"</Code>") {
			t.Errorf("%s: %d %s, want %d %s", c.name, code, out, c.want, c.code)
		}
	}
	sameTree(t, "the share", before, testenv.Tree(t, e.root))

	if code, out := do(alice, "PUT", "/mybucket/dir/obj.txt", []byte("object")); code != 200 {
		t.Fatalf("PUT into the bucket: %d %s", code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(e.root, "s3", "mybucket", "dir", "obj.txt")); string(b) != "object" {
		t.Errorf("the share holds %q", b)
	}
	if code, out := do(bob, "GET", "/", nil); code != 200 || !strings.Contains(out, "<Name>mybucket</Name>") || !strings.Contains(out, "<Name>second</Name>") {
		t.Errorf("ListBuckets: %d %s", code, out)
	}
	code, out := do(bob, "GET", "/?max-buckets=1", nil)
	tok := between(out, "<ContinuationToken>", "</ContinuationToken>")
	if code != 200 || strings.Count(out, "<Bucket>") != 1 || !strings.Contains(out, "<Name>mybucket</Name>") || tok == "" {
		t.Errorf("ListBuckets, one a page: %d %s", code, out)
	}
	if code, out = do(bob, "GET", "/?max-buckets=1&continuation-token="+tok, nil); code != 200 || !strings.Contains(out, "<Name>second</Name>") || strings.Contains(out, "<ContinuationToken>") {
		t.Errorf("ListBuckets, the second page: %d %s", code, out)
	}
	if code, out = do(bob, "GET", "/?prefix=sec", nil); code != 200 || strings.Contains(out, "mybucket") || !strings.Contains(out, "<Name>second</Name>") {
		t.Errorf("ListBuckets with a prefix: %d %s", code, out)
	}
	if code, out = do(alice, "GET", "/mybucket?list-type=2&max-keys=0&continuation-token=", nil); code != 200 || !strings.Contains(out, "<IsTruncated>false</IsTruncated>") ||
		!strings.Contains(out, "<ContinuationToken></ContinuationToken>") {
		t.Errorf("ListObjectsV2 of max-keys 0: %d %s", code, out)
	}
	if code, out := do(alice, "GET", "/mybucket?versions", nil); code != 200 || !strings.Contains(out, "<Key>dir/obj.txt</Key><VersionId>null</VersionId><IsLatest>true</IsLatest>") {
		t.Errorf("ListObjectVersions: %d %s", code, out)
	}
	del := []byte(`<Delete><Object><Key>dir/obj.txt</Key><VersionId>3HL4kqtJlcpXroDTDmjVBH40Nrjfkd</VersionId></Object></Delete>`)
	if code, out := do(alice, "POST", "/mybucket?delete", del); code != 200 || !strings.Contains(out, "<Code>NotImplemented</Code>") {
		t.Errorf("DeleteObjects of a version not kept: %d %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(e.root, "s3", "mybucket", "dir", "obj.txt")); err != nil {
		t.Fatalf("DeleteObjects of a version not kept deleted the object: %v", err)
	}
	// Directories made only to hold keys go with their last key; one
	// named by a key ending in /, or made at the share, stays.
	os.Mkdir(filepath.Join(e.root, "s3", "mybucket", "mine"), 0o755)
	for _, k := range []string{"a/b/c.txt", "keep/", "keep/x.txt", "mine/x.txt"} {
		if code, out := do(alice, "PUT", "/mybucket/"+k, nil); code != 200 {
			t.Fatalf("PUT %s: %d %s", k, code, out)
		}
	}
	for _, k := range []string{"a/b/c.txt", "keep/x.txt", "mine/x.txt"} {
		if code, out := do(alice, "DELETE", "/mybucket/"+k, nil); code != 204 {
			t.Fatalf("DELETE %s: %d %s", k, code, out)
		}
	}
	if _, err := os.Stat(filepath.Join(e.root, "s3", "mybucket", "a")); !os.IsNotExist(err) {
		t.Errorf("the directories made for a/b/c.txt are left after it: %v", err)
	}
	for _, d := range []string{"keep", "mine"} {
		if _, err := os.Stat(filepath.Join(e.root, "s3", "mybucket", d)); err != nil {
			t.Errorf("%s/ went with its last key: %v", d, err)
		}
		do(alice, "DELETE", "/mybucket/"+d+"/", nil)
	}
	if code, out := do(alice, "DELETE", "/mybucket", nil); code != 409 || !strings.Contains(out, "<Code>BucketNotEmpty</Code>") {
		t.Errorf("removing a bucket not empty: %d %s", code, out)
	}
	del = []byte(`<Delete><Object><Key>dir/obj.txt</Key><VersionId>null</VersionId></Object><Object><Key>dir/</Key></Object></Delete>`)
	if code, out := do(alice, "POST", "/mybucket?delete", del); code != 200 || strings.Contains(out, "<Error>") {
		t.Errorf("DeleteObjects: %d %s", code, out)
	}
	if code, out := do(alice, "DELETE", "/mybucket", nil); code != 204 {
		t.Errorf("removing an empty bucket: %d %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(e.root, "s3", "mybucket")); !os.IsNotExist(err) {
		t.Errorf("the bucket removed is still at the share: %v", err)
	}
}

// TestS3Metadata: x-amz-meta-* and the headers S3 keeps with an object
// (Content-Type, Cache-Control, ...) are kept at the share in user.s3.meta
// and answered by GET and HEAD; a PUT replaces them whole; a copy takes
// the source's (COPY) or the request's (REPLACE, onto itself too, which
// changes the metadata alone); a multipart upload keeps what its start
// gave.
func TestS3Metadata(t *testing.T) {
	e := newEnv(t, false)
	e.startS3(t)
	alice := e.s3keys["alice"]
	now := time.Now()
	do := func(method, p string, body []byte, hdr ...string) (int, string, http.Header) {
		t.Helper()
		return e.s3DoH(t, method, p, alice[0], alice[1], body, "", now, hdr...)
	}
	if code, out, _ := do("PUT", "/data/m.txt", []byte("meta"), "X-Amz-Meta-Color", "blue", "Content-Type", "text/plain", "Cache-Control", "no-cache"); code != 200 {
		t.Fatalf("PUT with metadata: %d %s", code, out)
	}
	_, _, h := do("HEAD", "/data/m.txt", nil)
	if h.Get("X-Amz-Meta-Color") != "blue" || h.Get("Content-Type") != "text/plain" || h.Get("Cache-Control") != "no-cache" {
		t.Errorf("HEAD after a PUT with metadata: %v", h)
	}
	b := make([]byte, 4096)
	n, err := unix.Getxattr(filepath.Join(e.root, "m.txt"), "user.s3.meta", b)
	if err != nil || !strings.Contains(string(b[:n]), `"X-Amz-Meta-Color":"blue"`) {
		t.Errorf("user.s3.meta at the share: %q %v", b[:max(n, 0)], err)
	}
	if code, out, _ := do("PUT", "/data/gz.txt", []byte("zipped"), "Content-Encoding", "gzip"); code != 200 {
		t.Fatalf("PUT gzip: %d %s", code, out)
	}
	if _, _, h = do("HEAD", "/data/gz.txt", nil); h.Get("Content-Encoding") != "gzip" || h.Get("Content-Length") != "6" {
		t.Errorf("HEAD of an object kept with Content-Encoding gzip: %v", h)
	}
	if code, out, _ := do("PUT", "/data/copy.txt", nil, "X-Amz-Copy-Source", "/data/m.txt"); code != 200 {
		t.Fatalf("copy: %d %s", code, out)
	}
	if _, _, h = do("HEAD", "/data/copy.txt", nil); h.Get("X-Amz-Meta-Color") != "blue" {
		t.Errorf("a copy (COPY) has not the source's metadata: %v", h)
	}
	if code, out, _ := do("PUT", "/data/m.txt", nil, "X-Amz-Copy-Source", "/data/m.txt", "X-Amz-Metadata-Directive", "REPLACE", "X-Amz-Meta-Color", "red"); code != 200 {
		t.Fatalf("copy onto itself with REPLACE: %d %s", code, out)
	}
	if _, body, h := do("GET", "/data/m.txt", nil); body != "meta" || h.Get("X-Amz-Meta-Color") != "red" || h.Get("Cache-Control") != "" {
		t.Errorf("after a copy onto itself with REPLACE: %q %v", body, h)
	}
	if code, out, _ := do("PUT", "/data/m.txt", []byte("plain")); code != 200 {
		t.Fatalf("PUT without metadata: %d %s", code, out)
	}
	if _, _, h = do("HEAD", "/data/m.txt", nil); h.Get("X-Amz-Meta-Color") != "" || h.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("a PUT without metadata left the old: %v", h)
	}
	code, out, _ := do("POST", "/data/mp.bin?uploads", nil, "X-Amz-Meta-Part", "yes", "Content-Type", "application/x-thing")
	id := between(out, "<UploadId>", "</UploadId>")
	if code != 200 || id == "" {
		t.Fatalf("initiate: %d %s", code, out)
	}
	if code, out, _ = do("PUT", "/data/mp.bin?partNumber=1&uploadId="+id, []byte("part one")); code != 200 {
		t.Fatalf("part: %d %s", code, out)
	}
	etag := `"` + hex.EncodeToString(md5sum([]byte("part one"))) + `"`
	complete := []byte(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>` + etag + `</ETag></Part></CompleteMultipartUpload>`)
	if code, out, _ = do("POST", "/data/mp.bin?uploadId="+id, complete); code != 200 {
		t.Fatalf("complete: %d %s", code, out)
	}
	if _, _, h = do("HEAD", "/data/mp.bin", nil); h.Get("X-Amz-Meta-Part") != "yes" || h.Get("Content-Type") != "application/x-thing" {
		t.Errorf("a multipart upload lost its metadata: %v", h)
	}
}

// presign returns a presigned URL of method on rawPath, signed as key at
// at, good for expires.
func (e *env) presign(t *testing.T, method, rawPath string, key [2]string, at time.Time, expires string) string {
	t.Helper()
	req, err := http.NewRequest(method, e.s3url+rawPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := req.URL.Query()
	q.Set("X-Amz-Expires", expires)
	req.URL.RawQuery = q.Encode()
	u, _, err := v4.NewSigner().PresignHTTP(context.Background(), aws.Credentials{AccessKeyID: key[0], SecretAccessKey: key[1]},
		req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", at)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestS3Presigned: a presigned URL (the signature in its query) reads and
// writes as its signer may, with curl and no credentials of its own,
// until it expires; an expired, altered, too long or forged one is
// refused, and nothing changes.
func TestS3Presigned(t *testing.T) {
	needTool(t, "curl")
	e := newEnv(t, false)
	e.startS3(t)
	os.WriteFile(filepath.Join(e.root, "shared.txt"), []byte("shared by a link\n"), 0o644)
	alice, bob := e.s3keys["alice"], e.s3keys["bob"]
	now := time.Now()
	if code, body, _ := e.curl(t, "", e.presign(t, "GET", "/data/shared.txt", bob, now, "600")); code != 200 || body != "shared by a link\n" {
		t.Errorf("GET through bob's presigned URL: %d %q", code, body)
	}
	up := filepath.Join(e.dir, "up.txt")
	os.WriteFile(up, []byte("sent by a link\n"), 0o644)
	if code, body, _ := e.curl(t, "", "-T", up, e.presign(t, "PUT", "/data/up.txt", alice, now, "600")); code != 200 {
		t.Errorf("PUT through alice's presigned URL: %d %s", code, body)
	}
	if b, _ := os.ReadFile(filepath.Join(e.root, "up.txt")); string(b) != "sent by a link\n" {
		t.Errorf("the presigned PUT left %q", b)
	}
	before := testenv.Tree(t, e.root)
	good := e.presign(t, "PUT", "/data/shared.txt", alice, now, "600")
	for _, c := range []struct {
		name, url string
		want      int
		code      string
	}{
		{"expired", e.presign(t, "PUT", "/data/shared.txt", alice, now.Add(-2*time.Hour), "3600"), 403, "AccessDenied"},
		{"another key", strings.Replace(good, "shared.txt", "other.txt", 1), 403, "SignatureDoesNotMatch"},
		{"longer than a week", e.presign(t, "PUT", "/data/shared.txt", alice, now, "604801"), 400, "AuthorizationQueryParametersError"},
		{"bob's, who may not write", e.presign(t, "PUT", "/data/shared.txt", bob, now, "600"), 403, "AccessDenied"},
		{"a forged signature", good[:len(good)-4] + "0000", 403, "SignatureDoesNotMatch"},
		{"an unknown key", strings.Replace(good, alice[0], "PANDOUNKNOWNKEY", 1), 403, "InvalidAccessKeyId"},
	} {
		code, body, _ := e.curl(t, "", "-T", up, c.url)
		if code != c.want || !strings.Contains(body, "<Code>"+c.code+"</Code>") {
			t.Errorf("%s: %d %s, want %d %s", c.name, code, body, c.want, c.code)
		}
	}
	sameTree(t, "the share", before, testenv.Tree(t, e.root))
}
