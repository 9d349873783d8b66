package gateway

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"pando.dev/pando/internal/testenv"
)

// s3cmd runs s3cmd as user against the S3 front end.
func (e *env) s3cmd(t *testing.T, user string, args ...string) (string, error) {
	t.Helper()
	host := strings.TrimPrefix(e.s3url, "https://")
	cfg := filepath.Join(e.dir, "s3cfg-"+user)
	os.WriteFile(cfg, []byte(fmt.Sprintf(`[default]
access_key = %s
secret_key = %s
host_base = %s
host_bucket = %s
use_https = True
ca_certs_file = %s
check_ssl_certificate = True
signature_v2 = False
bucket_location = us-east-1
multipart_chunk_size_mb = 5
progress_meter = False
`, e.s3keys[user][0], e.s3keys[user][1], host, host, e.cacert)), 0o600)
	cmd := exec.Command("s3cmd", append([]string{"-c", cfg}, args...)...)
	cmd.Dir = e.dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestS3Clients: s3cmd lists buckets and keys, puts a small file and a
// multipart one, gets it back, deletes; curl --aws-sigv4 gets a range;
// the MD5 ETags match what the clients compute.
func TestS3Clients(t *testing.T) {
	needTool(t, "s3cmd")
	needTool(t, "curl")
	e := newEnv(t, false)
	e.startS3(t)
	small := filepath.Join(e.dir, "small.txt")
	os.WriteFile(small, []byte("small object\n"), 0o644)
	big := filepath.Join(e.dir, "big.bin")
	testenv.MakeFile(t, big, 12<<20+3)

	run := func(user string, args ...string) string {
		t.Helper()
		out, err := e.s3cmd(t, user, args...)
		if err != nil {
			t.Fatalf("s3cmd %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if strings.Contains(out, "MD5") || strings.Contains(out, "WARNING") {
			t.Errorf("s3cmd %s warns:\n%s", strings.Join(args, " "), out)
		}
		return out
	}
	if out := run("alice", "ls"); !strings.Contains(out, "s3://data") {
		t.Errorf("s3cmd ls: %s", out)
	}
	run("alice", "put", small, "s3://data/dir/small.txt")
	if b, _ := os.ReadFile(filepath.Join(e.root, "dir", "small.txt")); string(b) != "small object\n" {
		t.Errorf("the share holds %q", b)
	}
	out := run("alice", "put", "--progress", "--multipart-chunk-size-mb=5", big, "s3://data/big.bin")
	if !strings.Contains(out, "part 3 of 3") {
		t.Errorf("s3cmd put of 12 MiB was not a multipart upload of 3 parts:\n%s", out)
	}
	testenv.SameFile(t, big, filepath.Join(e.root, "big.bin"))
	out = run("bob", "ls", "s3://data/")
	if !strings.Contains(out, "DIR  s3://data/dir/") || !strings.Contains(out, "s3://data/big.bin") {
		t.Errorf("s3cmd ls s3://data/:\n%s", out)
	}
	if out = run("bob", "ls", "-r", "s3://data"); !strings.Contains(out, "s3://data/dir/small.txt") {
		t.Errorf("s3cmd ls -r:\n%s", out)
	}
	got := filepath.Join(e.dir, "got.bin")
	run("bob", "get", "s3://data/big.bin", got)
	testenv.SameFile(t, big, got)

	want, _ := os.ReadFile(big)
	code, body, _ := e.curlS3(t, "alice", "-r", "5242875-5242884", e.s3url+"/data/big.bin")
	if code != 206 || body != string(want[5242875:5242885]) {
		t.Errorf("ranged GET with curl --aws-sigv4: %d %q", code, body)
	}
	// Virtual-host style: the bucket in the host name.
	code, body, _ = e.curlS3(t, "alice", "--connect-to", "data.s3.localhost:"+port(e.s3url)+":"+strings.TrimPrefix(e.s3url, "https://"),
		"-k", "https://data.s3.localhost:"+port(e.s3url)+"/dir/small.txt")
	if code != 200 || body != "small object\n" {
		t.Errorf("virtual-host-style GET: %d %q", code, body)
	}
	run("alice", "del", "s3://data/dir/small.txt")
	if _, err := os.Stat(filepath.Join(e.root, "dir", "small.txt")); err == nil {
		t.Error("s3cmd del left the file")
	}
}

func port(u string) string { return u[strings.LastIndex(u, ":")+1:] }

// curlS3 runs curl --aws-sigv4 as user.
func (e *env) curlS3(t *testing.T, user string, args ...string) (int, string, string) {
	k := e.s3keys[user]
	return e.curl(t, "", append([]string{"--aws-sigv4", "aws:amz:us-east-1:s3", "-u", k[0] + ":" + k[1]}, args...)...)
}

// s3Do signs a request with the AWS SDK's signer as key and secret, for
// the payload hash given ("" for the body's), and sends it.
func (e *env) s3Do(t *testing.T, method, rawPath, key, secret string, body []byte, payload string, at time.Time, hdr ...string) (int, string) {
	t.Helper()
	code, out, _ := e.s3DoH(t, method, rawPath, key, secret, body, payload, at, hdr...)
	return code, out
}

// s3DoH is s3Do that also returns the response's headers.
func (e *env) s3DoH(t *testing.T, method, rawPath, key, secret string, body []byte, payload string, at time.Time, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, e.s3url+"/", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	p, q, _ := strings.Cut(rawPath, "?")
	req.URL.Opaque = "//" + req.URL.Host + p
	req.URL.RawQuery = q
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if payload == "" {
		sum := sha256.Sum256(body)
		payload = hex.EncodeToString(sum[:])
	}
	req.Header.Set("X-Amz-Content-Sha256", payload)
	err = v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).SignHTTP(context.Background(),
		aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}, req, payload, "s3", "us-east-1", at)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(e.cacert)
	pool.AppendCertsFromPEM(pem)
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestS3Refusals: forged, unknown, stale and unsigned requests, a body
// that is not the one signed, a user without the right, and hostile keys
// and buckets are refused with S3's errors, and nothing changes.
func TestS3Refusals(t *testing.T) {
	e := newEnv(t, false)
	e.startS3(t)
	os.WriteFile(filepath.Join(e.root, "keep.txt"), []byte("kept"), 0o644)
	os.Mkdir(filepath.Join(e.root, "dir"), 0o755)
	outside := filepath.Dir(e.root)
	before, beforeOut := testenv.Tree(t, e.root), exports(testenv.Tree(t, outside))
	alice, bob := e.s3keys["alice"], e.s3keys["bob"]
	now := time.Now()
	body := []byte("payload")
	sum := sha256.Sum256([]byte("another payload"))

	// bob starts a multipart upload, sends a part, and completes it.
	code, out := e.s3Do(t, "POST", "/data/mp.bin?uploads", bob[0], bob[1], nil, "", now)
	id := between(out, "<UploadId>", "</UploadId>")
	if code != 200 || id == "" {
		t.Fatalf("bob's initiate: %d %s", code, out)
	}
	if code, out = e.s3Do(t, "PUT", "/data/mp.bin?partNumber=1&uploadId="+id, bob[0], bob[1], body, "", now); code != 200 {
		t.Fatalf("bob's part: %d %s", code, out)
	}
	partETag := `"` + hex.EncodeToString(md5sum(body)) + `"`
	complete := []byte(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>` + partETag + `</ETag></Part></CompleteMultipartUpload>`)

	for _, c := range []struct {
		name, method, path string
		key                [2]string
		body               []byte
		payload            string
		at                 time.Time
		want               int
		code               string
	}{
		{"forged signature", "PUT", "/data/new.txt", [2]string{alice[0], "not-the-secret"}, body, "", now, 403, "SignatureDoesNotMatch"},
		{"unknown key", "PUT", "/data/new.txt", [2]string{"PANDOUNKNOWN", alice[1]}, body, "", now, 403, "InvalidAccessKeyId"},
		{"signed an hour ago", "PUT", "/data/new.txt", alice, body, "", now.Add(-time.Hour), 403, "RequestTimeTooSkewed"},
		{"body not the one signed", "PUT", "/data/new.txt", alice, body, hex.EncodeToString(sum[:]), now, 400, "XAmzContentSHA256Mismatch"},
		{"bob PUT", "PUT", "/data/new.txt", bob, body, "", now, 403, "AccessDenied"},
		{"bob PUT over", "PUT", "/data/keep.txt", bob, body, "", now, 403, "AccessDenied"},
		{"bob PUT below a new directory", "PUT", "/data/newdir/x", bob, body, "", now, 403, "AccessDenied"},
		{"bob DELETE", "DELETE", "/data/keep.txt", bob, nil, "", now, 403, "AccessDenied"},
		{"bob copy", "PUT", "/data/copy.txt", bob, nil, "", now, 403, "AccessDenied"},
		{"bob completes", "POST", "/data/mp.bin?uploadId=" + id, bob, complete, "", now, 403, "AccessDenied"},
		{"alice completes bob's upload", "POST", "/data/mp.bin?uploadId=" + id, alice, complete, "", now, 404, "NoSuchUpload"},
		{"key %2e%2e", "PUT", "/data/%2e%2e/x", alice, body, "", now, 400, "InvalidArgument"},
		{"key a/../..", "PUT", "/data/a/../../x", alice, body, "", now, 400, "InvalidArgument"},
		{"key ..%5c", "PUT", "/data/..%5cx", alice, body, "", now, 400, "InvalidArgument"},
		{"key with //", "PUT", "/data/a//x", alice, body, "", now, 400, "InvalidArgument"},
		{"bucket %2e%2e", "PUT", "/%2e%2e/x", alice, body, "", now, 400, "InvalidBucketName"},
		{"bucket ..", "GET", "/../d/data/keep.txt", alice, nil, "", now, 400, "InvalidBucketName"},
		{"copy from ..", "PUT", "/data/c.txt", alice, nil, "", now, 400, "InvalidArgument"},
		{"deleting a bucket", "DELETE", "/data", alice, nil, "", now, 409, "BucketNotEmpty"},
		{"malformed delete XML", "POST", "/data?delete", alice, []byte("<Delete><Object>"), "", now, 400, "MalformedXML"},
	} {
		var hdr []string
		switch c.name {
		case "bob copy":
			hdr = []string{"X-Amz-Copy-Source", "/data/keep.txt"}
		case "copy from ..":
			hdr = []string{"X-Amz-Copy-Source", "/data/../d/data/keep.txt"}
		}
		code, out := e.s3Do(t, c.method, c.path, c.key[0], c.key[1], c.body, c.payload, c.at, hdr...)
		if code != c.want || !strings.Contains(out, "<Code>"+c.code+"</Code>") {
			t.Errorf("%s: %d %s, want %d %s", c.name, code, out, c.want, c.code)
		}
	}
	// Not signed at all.
	if code, _, _ := e.curl(t, "", "-T", filepath.Join(e.dir, "passwd"), e.s3url+"/data/new.txt"); code != 403 {
		t.Errorf("an unsigned PUT: %d", code)
	}
	sameTree(t, "the share", before, testenv.Tree(t, e.root))
	sameTree(t, "beside the share", beforeOut, exports(testenv.Tree(t, outside)))
	// alice may, and the front end serves on.
	if code, out := e.s3Do(t, "PUT", "/data/new.txt", alice[0], alice[1], body, "", now); code != 200 {
		t.Errorf("alice's PUT after the refusals: %d %s", code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(e.root, "new.txt")); string(b) != "payload" {
		t.Errorf("alice's PUT left %q", b)
	}
}

// needBoto3 skips (fails in CI) a test that needs boto3.
func needBoto3(t *testing.T) {
	t.Helper()
	needTool(t, "python3")
	if err := exec.Command("python3", "-c", "import boto3").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("boto3 is not installed (./dev test installs it with pip)")
		}
		t.Skip("boto3 is not installed (./dev test installs it with pip)")
	}
}

func between(s, a, b string) string {
	_, rest, ok := strings.Cut(s, a)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, b)
	return v
}

func md5sum(b []byte) []byte {
	s := md5.Sum(b)
	return s[:]
}

// TestS3Boto3: the AWS SDK for Python (boto3, from PyPI) against the S3
// front end: buckets, a put and its MD5 ETag, a multipart upload (three
// parts, with its ETag of parts), a download byte for byte, a ranged get,
// a paginated ListObjectsV2, a delete. Bob, who may not write, is refused
// a put with AccessDenied and the share is unchanged.
func TestS3Boto3(t *testing.T) {
	needBoto3(t)
	e := newEnv(t, false)
	e.startS3(t)
	big := filepath.Join(e.dir, "big.bin")
	testenv.MakeFile(t, big, 12<<20+3)
	script, _ := filepath.Abs(filepath.Join("testdata", "boto3_client.py"))
	k := e.s3keys["alice"]
	cmd := exec.Command("python3", script, e.s3url, e.cacert, k[0], k[1], big, e.dir)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "ok\n") {
		t.Fatalf("boto3 as alice: %v\n%s", err, out)
	}
	testenv.SameFile(t, big, filepath.Join(e.root, "boto", "big.bin"))

	before := testenv.Tree(t, e.root)
	kb := e.s3keys["bob"]
	put := exec.Command("python3", "-c", `
import sys, boto3
from botocore.config import Config
from botocore.exceptions import ClientError
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id=sys.argv[3], aws_secret_access_key=sys.argv[4],
    region_name="us-east-1", verify=sys.argv[2], config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
try:
    s3.put_object(Bucket="data", Key="boto/bob.txt", Body=b"bob")
    print("put succeeded")
except ClientError as e:
    print(e.response["Error"]["Code"])
`, e.s3url, e.cacert, kb[0], kb[1])
	if out, err := put.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "AccessDenied" {
		t.Errorf("boto3 put as bob, who may not write: %v %s", err, out)
	}
	sameTree(t, "the share", before, testenv.Tree(t, e.root))
}
