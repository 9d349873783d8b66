package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/web"
	"pando.dev/pando/internal/wire"
)

// TestHTTPCurl: curl, as alice with her certificate and as bob with a
// password, puts, gets ranges, asks conditionally, lists and deletes.
func TestHTTPCurl(t *testing.T) {
	needTool(t, "curl")
	e := newEnv(t, false)
	src := filepath.Join(e.dir, "src")
	testenv.MakeFile(t, src, 3<<20+17)
	want, _ := os.ReadFile(src)

	code, _, _ := e.curl(t, "alice", "-T", src, e.url+"/d/data/f.bin")
	if code != 201 {
		t.Fatalf("PUT by alice: %d, want 201", code)
	}
	if got, _ := os.ReadFile(filepath.Join(e.root, "f.bin")); string(got) != string(want) {
		t.Fatalf("the share holds %d bytes, want the %d put", len(got), len(want))
	}
	code, body, hdr := e.curl(t, "pw:bob", "-r", "1048570-1048589", e.url+"/d/data/f.bin")
	if code != 206 || body != string(want[1048570:1048590]) {
		t.Fatalf("ranged GET by bob: %d, %d bytes, want 206 and 20 bytes across a block boundary", code, len(body))
	}
	if !strings.Contains(hdr, "Content-Range: bytes 1048570-1048589/3145745") {
		t.Errorf("ranged GET: headers\n%s", hdr)
	}
	code, body, hdr = e.curl(t, "alice", "-I", e.url+"/d/data/f.bin")
	etag := regexp.MustCompile(`(?i)etag: (".*")`).FindStringSubmatch(hdr)
	lm := regexp.MustCompile(`(?i)last-modified: (.*)\r`).FindStringSubmatch(hdr)
	if code != 200 || etag == nil || lm == nil || !strings.Contains(hdr, "Content-Length: 3145745") {
		t.Fatalf("HEAD: %d, %q %v %v headers\n%s", code, body, etag, lm, hdr)
	}
	if code, _, _ = e.curl(t, "alice", "-H", "If-None-Match: "+etag[1], e.url+"/d/data/f.bin"); code != 304 {
		t.Errorf("If-None-Match with the ETag: %d, want 304", code)
	}
	if code, _, _ = e.curl(t, "alice", "-H", "If-Modified-Since: "+lm[1], e.url+"/d/data/f.bin"); code != 304 {
		t.Errorf("If-Modified-Since Last-Modified: %d, want 304", code)
	}
	if code, body, _ = e.curl(t, "alice", "-H", `If-None-Match: "0-0"`, e.url+"/d/data/f.bin"); code != 200 || len(body) != len(want) {
		t.Errorf("If-None-Match with another ETag: %d, %d bytes", code, len(body))
	}

	os.Mkdir(filepath.Join(e.root, "sub dir"), 0o755)
	os.WriteFile(filepath.Join(e.root, "sub dir", "<b>.txt"), []byte("x"), 0o644)
	code, body, _ = e.curl(t, "alice", e.url+"/d/data/?format=json")
	var l struct {
		Path    string
		Entries []web.Entry
	}
	if err := json.Unmarshal([]byte(body), &l); code != 200 || err != nil || l.Path != "/d/data" || len(l.Entries) != 2 ||
		l.Entries[0].Name != "f.bin" || l.Entries[0].Size != int64(len(want)) || l.Entries[0].ETag != etag[1] || l.Entries[1].Type != "dir" {
		t.Errorf("JSON listing: %d %v %+v", code, err, l)
	}
	code, body, hdr = e.curl(t, "alice", e.url+"/d/data/sub%20dir/")
	if code != 200 || !strings.Contains(body, `href="/d/data/sub%20dir/%3Cb%3E.txt"`) || !strings.Contains(body, "&lt;b&gt;.txt") || !strings.Contains(hdr, "text/html") {
		t.Errorf("HTML listing: %d\n%s", code, body)
	}

	if code, _, _ = e.curl(t, "alice", "-X", "DELETE", e.url+"/d/data/f.bin"); code != 204 {
		t.Errorf("DELETE by alice: %d, want 204", code)
	}
	if _, err := os.Stat(filepath.Join(e.root, "f.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after DELETE the share still has the file: %v", err)
	}
	if code, _, _ = e.curl(t, "alice", e.url+"/d/data/f.bin"); code != 404 {
		t.Errorf("GET after DELETE: %d, want 404", code)
	}
	ml, err := e.g.ServeMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Close()
	out, err := exec.Command("curl", "-sS", "http://"+ml.Addr().String()+"/metrics").Output()
	for _, want := range []string{`pando_gateway_requests_total{outcome="all"}`, `pando_rpcs_total{op="getattr"}`, `pando_gateway_users 2`, `pando_gateway_info{consistency="window=1s",gateway="gateway:web@d",write="close"} 1`} {
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("metrics lack %s: %v\n%s", want, err, out)
		}
	}
	st := e.g.Stats()
	if st.Users != 2 || st.Requests < 9 || st.Direct == 0 || st.RPCs["getfile"]+st.RPCs["read"]+st.RPCs["open"] == 0 {
		t.Errorf("stats: %+v", st)
	}
}

// TestHTTPRefusals: a user without the right, no or false credentials,
// another domain's certificate, the gateway's own certificate, and
// hostile paths are refused, and the share is unchanged.
func TestHTTPRefusals(t *testing.T) {
	needTool(t, "curl")
	e := newEnv(t, false)
	os.WriteFile(filepath.Join(e.root, "keep.txt"), []byte("kept"), 0o644)
	os.Mkdir(filepath.Join(e.root, "dir"), 0o755)
	outside := filepath.Dir(e.root)
	before, beforeOut := testenv.Tree(t, e.root), exports(testenv.Tree(t, outside))
	body := filepath.Join(e.dir, "payload")
	os.WriteFile(body, []byte("payload"), 0o644)

	// Another domain, with a user of the same name.
	other := testenv.New(t, "d2")
	r, err := other.Client(other.Admin).Admin().UserAdd(context.Background(), "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(e.dir, "forged.crt"), r.Cert, 0o600)
	os.WriteFile(filepath.Join(e.dir, "forged.key"), r.Key, 0o600)
	e.users["forged"] = [2]string{filepath.Join(e.dir, "forged.crt"), filepath.Join(e.dir, "forged.key")}
	os.WriteFile(filepath.Join(e.dir, "gw.crt"), []byte(e.gwCfg.Cert), 0o600)
	os.WriteFile(filepath.Join(e.dir, "gw.key"), []byte(e.gwCfg.Key), 0o600)
	e.users["gateway"] = [2]string{filepath.Join(e.dir, "gw.crt"), filepath.Join(e.dir, "gw.key")}

	for _, c := range []struct {
		name, user string
		args       []string
		want       int
	}{
		{"bob PUT new", "bob", []string{"-T", body, e.url + "/d/data/new.txt"}, 403},
		{"bob PUT over", "pw:bob", []string{"-T", body, e.url + "/d/data/keep.txt"}, 403},
		{"bob DELETE", "bob", []string{"-X", "DELETE", e.url + "/d/data/keep.txt"}, 403},
		{"bob DELETE dir", "bob", []string{"-X", "DELETE", e.url + "/d/data/dir"}, 403},
		{"nobody GET", "", []string{e.url + "/d/data/keep.txt"}, 401},
		{"nobody PUT", "", []string{"-T", body, e.url + "/d/data/new.txt"}, 401},
		{"wrong password", "", []string{"-u", "alice:alice-wrong-pw", "-T", body, e.url + "/d/data/new.txt"}, 401},
		{"unknown user", "", []string{"-u", "carol:carol-secret-pw", e.url + "/d/data/keep.txt"}, 401},
		{"another domain's certificate", "forged", []string{"-T", body, e.url + "/d/data/new.txt"}, 0},
		{"the gateway's own certificate", "gateway", []string{"-T", body, e.url + "/d/data/new.txt"}, 401},
		{"..", "alice", []string{"-T", body, e.url + "/d/data/../escape.txt"}, 400},
		{"%2e%2e", "alice", []string{"-T", body, e.url + "/d/data/%2e%2e/escape.txt"}, 400},
		{"%2E%2E in GET", "alice", []string{e.url + "/d/data/dir/%2E%2E/%2E%2E/x"}, 400},
		{"..%5c", "alice", []string{"-T", body, e.url + "/d/data/..%5cescape.txt"}, 400},
		{"..\\", "alice", []string{"-T", body, e.url + "/d/data/..\\escape.txt"}, 400},
		{"%00", "alice", []string{"-T", body, e.url + "/d/data/a%00b"}, 400},
		{"//", "alice", []string{"-T", body, e.url + "/d//data/x"}, 400},
		{"PUT over a directory", "alice", []string{"-T", body, e.url + "/d/data/dir"}, 409},
		{"PUT with no parent", "alice", []string{"-T", body, e.url + "/d/data/none/x"}, 409},
		{"oversized header", "alice", []string{"-H", "X-Big: " + strings.Repeat("a", 100<<10), "-T", body, e.url + "/d/data/new.txt"}, 431},
		// What the front end does not serve is refused, never served as
		// the plain request it resembles.
		{"PUT of a range", "alice", []string{"-T", body, "-H", "Content-Range: bytes 0-6/100", e.url + "/d/data/keep.txt"}, 501},
		{"PUT with a query", "alice", []string{"-T", body, e.url + "/d/data/keep.txt?append=1"}, 501},
		{"DELETE with a query", "alice", []string{"-X", "DELETE", e.url + "/d/data/keep.txt?version=2"}, 501},
		{"GET with an unknown query", "alice", []string{e.url + "/d/data/keep.txt?acl"}, 501},
		{"PUT gzip-encoded", "alice", []string{"-T", body, "-H", "Content-Encoding: gzip", e.url + "/d/data/keep.txt"}, 415},
		{"PUT If-None-Match: * over a file", "alice", []string{"-T", body, "-H", "If-None-Match: *", e.url + "/d/data/keep.txt"}, 412},
		{"PUT If-Match of another version", "alice", []string{"-T", body, "-H", `If-Match: "0-0"`, e.url + "/d/data/keep.txt"}, 412},
		{"PUT If-Unmodified-Since long ago", "alice", []string{"-T", body, "-H", "If-Unmodified-Since: Mon, 01 Jan 2001 00:00:00 GMT", e.url + "/d/data/keep.txt"}, 412},
		{"DELETE If-Match of another version", "alice", []string{"-X", "DELETE", "-H", `If-Match: "0-0"`, e.url + "/d/data/keep.txt"}, 412},
		{"POST", "alice", []string{"-X", "POST", "--data-binary", "@" + body, e.url + "/d/data/keep.txt"}, 405},
		{"PATCH", "alice", []string{"-X", "PATCH", "--data-binary", "@" + body, e.url + "/d/data/keep.txt"}, 405},
		{"MOVE without WebDAV", "alice", []string{"-X", "MOVE", "-H", "Destination: " + e.url + "/d/data/moved.txt", e.url + "/d/data/keep.txt"}, 405},
		{"an unknown method", "alice", []string{"-X", "FROB", e.url + "/d/data/keep.txt"}, 501},
	} {
		code, msg, _ := e.curl(t, c.user, c.args...)
		if code != c.want {
			t.Errorf("%s: %d (%s), want %d", c.name, code, strings.TrimSpace(msg), c.want)
		}
	}
	sameTree(t, "the share", before, testenv.Tree(t, e.root))
	sameTree(t, "beside the share", beforeOut, exports(testenv.Tree(t, outside)))
	// The gateway serves on.
	if code, body, _ := e.curl(t, "alice", e.url+"/d/data/keep.txt"); code != 200 || body != "kept" {
		t.Errorf("after the refusals: %d %q", code, body)
	}
}

// TestActForOnlyAsGateway: the controller issues a token in another's
// name only to a gateway, and none to a gateway in its own name.
func TestActForOnlyAsGateway(t *testing.T) {
	e := newEnv(t, false)
	os.WriteFile(filepath.Join(e.root, "f"), []byte("x"), 0o644)
	ctx := context.Background()
	// alice pretending to be a gateway acting for bob.
	aliceCfg := *e.gwCfg
	aliceCfg.User = "alice"
	cert, _ := os.ReadFile(e.users["alice"][0])
	key, _ := os.ReadFile(e.users["alice"][1])
	aliceCfg.Cert, aliceCfg.Key = string(cert), string(key)
	c, err := client.New(&aliceCfg, client.Options{ActFor: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.ReadDir(ctx, "/d/data")
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeAccess || !strings.Contains(we.Message, "only a gateway") {
		t.Errorf("a user acting for another: %v", err)
	}
	// The gateway in its own name.
	gc, err := client.New(e.gwCfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if _, err = gc.ReadDir(ctx, "/d/data"); !errors.As(err, &we) || we.Code != wire.CodeAccess || !strings.Contains(we.Message, "no rights of its own") {
		t.Errorf("the gateway in its own name: %v", err)
	}
	// The gateway for a revoked user.
	if err := e.d.Client(e.d.Admin).Admin().UserRevoke(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	bc, err := client.New(e.gwCfg, client.Options{ActFor: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	if _, err = bc.ReadDir(ctx, "/d/data"); !errors.As(err, &we) || we.Code != wire.CodeTokenRevoked {
		t.Errorf("the gateway for a revoked user: %v", err)
	}
	// The gateway for alice reads, with her rights.
	ac, err := client.New(e.gwCfg, client.Options{ActFor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	if ents, err := ac.ReadDir(ctx, "/d/data"); err != nil || len(ents) != 1 {
		t.Errorf("the gateway for alice: %v %v", ents, err)
	}
}

// TestTransfersShown: a PUT under way is shown on its user's status page
// with its path and bytes so far (to others only as a count), and is gone
// once done.
func TestTransfersShown(t *testing.T) {
	needTool(t, "curl")
	e := newEnv(t, false)
	cmd := exec.Command("curl", "-sS", "--cacert", e.cacert, "--cert", e.users["alice"][0], "--key", e.users["alice"][1],
		"-o", "/dev/null", "-w", "%{http_code}", "-T", "-", e.url+"/d/data/slow.bin")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	in.Write(make([]byte, 1<<20))
	var page string
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if _, page, _ = e.curl(t, "alice", e.url+"/.pando/status"); strings.Contains(page, "/d/data/slow.bin") {
			break
		}
	}
	// bob is told only that someone else has one under way.
	if _, bobs, _ := e.curl(t, "bob", e.url+"/.pando/status"); strings.Contains(bobs, "slow.bin") || !strings.Contains(bobs, "1 of others") {
		t.Errorf("bob's status page shows alice's transfer:\n%s", bobs)
	}
	if !regexp.MustCompile(`<td>alice</td><td>PUT</td><td>/d/data/slow.bin</td><td>\d+ of \? bytes</td>`).MatchString(page) {
		t.Errorf("the status page does not show the PUT under way:\n%s", page)
	}
	in.Close()
	if err := cmd.Wait(); err != nil || out.String() != "201" {
		t.Fatalf("the PUT: %v %s", err, out.String())
	}
	if _, page, _ = e.curl(t, "alice", e.url+"/.pando/status"); strings.Contains(page, "slow.bin") {
		t.Errorf("the status page still shows the PUT done")
	}
}

// TestUsersEvicted: past MaxUsers the user idle longest is closed, and
// served again (from the same cache directory) when they come back.
func TestUsersEvicted(t *testing.T) {
	e := newEnv(t, false)
	os.WriteFile(filepath.Join(e.root, "f"), []byte("x"), 0o644)
	g, err := New(Config{Client: e.gwCfg, Cache: cache.Options{Dir: filepath.Join(e.dir, "evict"), MemoryBytes: 8 << 20, DiskBytes: 1 << 30}, MaxUsers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := context.Background()
	for i, u := range []string{"alice", "bob", "alice", "bob", "alice"} {
		v, err := g.Acquire(ctx, u)
		if err != nil {
			t.Fatalf("%d: %s: %v", i, u, err)
		}
		if ents, err := v.ReadDir(ctx, "/d/data"); err != nil || len(ents) < 1 {
			t.Errorf("%d: %s lists %v %v", i, u, ents, err)
		}
		g.Release(u)
	}
	if n := g.Stats().Users; n != 1 {
		t.Errorf("%d users kept, want 1", n)
	}
}

// TestPutCutShort: a PUT whose body ends before its Content-Length (the
// client went away) changes nothing: neither the file it would replace
// nor a new one.
func TestPutCutShort(t *testing.T) {
	e := newEnv(t, true)
	os.WriteFile(filepath.Join(e.root, "keep.txt"), []byte("kept"), 0o644)
	before := testenv.Tree(t, e.root)
	pem, _ := os.ReadFile(e.cacert)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	for _, name := range []string{"keep.txt", "new.txt"} {
		c, err := tls.Dial("tcp", strings.TrimPrefix(e.url, "https://"), &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "PUT /d/data/%s HTTP/1.1\r\nHost: x\r\nAuthorization: Basic %s\r\nContent-Length: 100000\r\n\r\npartial", name,
			base64.StdEncoding.EncodeToString([]byte("alice:alice-secret-pw")))
		time.Sleep(200 * time.Millisecond)
		c.Close()
	}
	time.Sleep(500 * time.Millisecond) // the gateway sees the end and gives up
	sameTree(t, "the share", before, testenv.Tree(t, e.root))
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "cache", "put-spool")); len(ents) != 0 {
		t.Errorf("%d bodies left in the spool", len(ents))
	}
}
