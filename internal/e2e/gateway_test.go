package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestGatewayServe: pando serve http, run with a gateway's credentials
// (pando user add --gateway) and a password file (pando serve passwd),
// takes a PUT and serves a GET from curl with alice's rights; it refuses
// to start with a user's credentials or in clear text off loopback.
func TestGatewayServe(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed (./dev test installs it)")
	}
	d := newDomain(t, "d")
	root := d.addShare("data")
	alice := d.addUser("alice")
	d.addUser("bob")
	d.pando(d.admin, "acl", "set", "/d/data", "alice", "rlidwk", "bob", "rl").ok()
	web := filepath.Join(d.dir, "web.json")
	if out := d.pando(d.admin, "user", "add", "web", "--gateway", "-o", web).ok().stdout; !strings.Contains(out, "gateway:web@d") {
		t.Errorf("pando user add --gateway: %q", out)
	}
	pw := filepath.Join(d.dir, "passwd")
	runPando(t, "alice-password\n", web, "serve", "passwd", "--passwords", pw, "alice").ok()
	runPando(t, "bob-password\n", web, "serve", "passwd", "--passwords", pw, "bob").ok()
	runPando(t, "short\n", web, "serve", "passwd", "--passwords", pw, "bob").fails(1, "shorter than 8")

	d.pando(alice, "serve", "http", "--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "c0")).fails(1, "alice@d", "--gateway")
	d.pando(web, "serve", "http", "--insecure", "--listen", "0.0.0.0:0", "--cache-dir", filepath.Join(d.dir, "c0")).fails(2, "loopback")

	_, m := start(t, `at (https://\S+)/ \(its certificate: (\S+)\)`, nil, "--config", web, "serve", "http",
		"--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "gwcache"), "--passwords", pw)
	url, cacert := m[1], m[2]
	src := filepath.Join(d.dir, "src.txt")
	os.WriteFile(src, []byte("through the gateway\n"), 0o644)
	curl := func(user string, args ...string) string {
		out, _ := exec.Command("curl", append([]string{"-sS", "--cacert", cacert, "-u", user, "-w", "%{http_code}"}, args...)...).Output()
		return string(out)
	}
	if out := curl("alice:alice-password", "-o", "/dev/null", "-T", src, url+"/d/data/g.txt"); out != "201" {
		t.Fatalf("PUT as alice: %s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "g.txt")); string(b) != "through the gateway\n" {
		t.Errorf("the share holds %q", b)
	}
	if out := curl("bob:bob-password", url+"/d/data/g.txt"); out != "through the gateway\n200" {
		t.Errorf("GET as bob: %q", out)
	}
	if out := curl("bob:bob-password", "-o", "/dev/null", "-T", src, url+"/d/data/b.txt"); out != "403" {
		t.Errorf("PUT as bob, who may not write: %s", out)
	}
	if _, err := os.Stat(filepath.Join(root, "b.txt")); err == nil {
		t.Error("bob's refused PUT left a file at the share")
	}
	if d.pando(alice, "cat", "/d/data/g.txt").ok().stdout != "through the gateway\n" {
		t.Error("the CLI does not read what the gateway wrote")
	}

	_, m = start(t, `at (https://\S+)/ \(its certificate: (\S+)\)`, nil, "--config", web, "serve", "webdav",
		"--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "davcache"), "--passwords", pw)
	url, cacert = m[1], m[2]
	if out := curl("alice:alice-password", "-o", "/dev/null", "-X", "MKCOL", url+"/d/data/col"); out != "201" {
		t.Errorf("MKCOL as alice: %s", out)
	}
	if out := curl("bob:bob-password", "-X", "PROPFIND", "-H", "Depth: 1", url+"/d/data/"); !strings.HasSuffix(out, "207") || !strings.Contains(out, "/d/data/col/") {
		t.Errorf("PROPFIND as bob: %s", out)
	}
	if fi, err := os.Stat(filepath.Join(root, "col")); err != nil || !fi.IsDir() {
		t.Errorf("MKCOL made no directory at the share: %v", err)
	}

	keys := filepath.Join(d.dir, "s3keys")
	out := runPando(t, "", web, "serve", "s3-key", "--keys", keys, "bob").ok().stdout
	access, secret := between(out, "access key ", " for"), between(out, "secret key ", "\n")
	_, m = start(t, `at (https://\S+)/ \(its certificate: (\S+)\)`, nil, "--config", web, "serve", "s3",
		"--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(d.dir, "s3cache"), "--keys", keys)
	url, cacert = m[1], m[2]
	got, _ := exec.Command("curl", "-sS", "--cacert", cacert, "--aws-sigv4", "aws:amz:us-east-1:s3", "-u", access+":"+secret,
		"-w", "%{http_code}", url+"/data/g.txt").Output()
	if string(got) != "through the gateway\n200" {
		t.Errorf("S3 GET as bob with curl --aws-sigv4: %q", got)
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

// TestUpServeDoors: pando up with a mount and --serve http, webdav, s3
// nfs and smb (five gateways, each with its own cache, consistency window
// 3s): a file written through each door is read through each other, each
// pair once, within the window's bound (SMB writes through the share of
// --smb-export data=/local/data, and reads through the domain's).
func TestUpServeDoors(t *testing.T) {
	for _, tool := range []string{"curl", "s3cmd", "nfs-cp", "nfs-cat", "smbclient"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (./dev test installs it)", tool)
		}
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	mnt := filepath.Join(dir, "mnt")
	os.Mkdir(data, 0o755)
	os.Mkdir(mnt, 0o755)
	state := filepath.Join(dir, "state")
	pw, keys, smbpw := filepath.Join(dir, "passwd"), filepath.Join(dir, "s3keys"), filepath.Join(dir, "smbpasswd")
	runPando(t, "admin-password\n", "/nonexistent", "serve", "passwd", "--passwords", pw, "admin").ok()
	runPando(t, "admin-password\n", "/nonexistent", "serve", "smb-passwd", "--passwords", smbpw, "admin").ok()
	out := runPando(t, "", "/nonexistent", "serve", "s3-key", "--keys", keys, "admin").ok().stdout
	access, secret := between(out, "access key ", " for"), between(out, "secret key ", "\n")
	p, _ := start(t, `pando is up`, nil, "up", "--state", state, "--share", data, "--listen", "127.0.0.1:0", "--no-config",
		"--mount", mnt, "--serve", "http=127.0.0.1:0", "--serve", "webdav=127.0.0.1:0", "--serve", "s3=127.0.0.1:0",
		"--serve", "nfs=127.0.0.1:0", "--serve", "smb=127.0.0.1:0", "--passwords", pw, "--s3-keys", keys, "--smb-passwords", smbpw,
		"--smb-export", "data=/local/data")
	urls := map[string]string{}
	for _, m := range regexp.MustCompile(`(\w+) gateway at (https://\S+)/ \(its certificate: \S+\)`).FindAllStringSubmatch(p.output(), -1) {
		urls[m[1]] = m[2]
	}
	nfsPort := regexp.MustCompile(`nfs gateway at nfs://127\.0\.0\.1:(\d+)/`).FindStringSubmatch(p.output())
	smbAddr := between(p.output(), "smb gateway at smb://", "/local")
	if len(urls) != 3 || nfsPort == nil || smbAddr == "" {
		t.Fatalf("pando up does not say where its gateways are:\n%s", p.output())
	}
	// Each gateway has its certificate in its own cache directory.
	certOf := func(door string) string { return filepath.Join(state, "gateway-"+door, "gateway.crt") }
	host := strings.TrimPrefix(urls["s3"], "https://")
	s3cfg := filepath.Join(dir, "s3cfg")
	os.WriteFile(s3cfg, []byte("[default]\naccess_key = "+access+"\nsecret_key = "+secret+"\nhost_base = "+host+"\nhost_bucket = "+host+
		"\nuse_https = True\nca_certs_file = "+certOf("s3")+"\nsignature_v2 = False\nprogress_meter = False\n"), 0o600)
	curl := func(door string, args ...string) (string, error) {
		a := []string{"-sS", "-f", "--cacert", certOf(door)}
		if door == "s3" {
			a = append(a, "--aws-sigv4", "aws:amz:us-east-1:s3", "-u", access+":"+secret)
		} else {
			a = append(a, "-u", "admin:admin-password")
		}
		b, err := exec.Command("curl", append(a, args...)...).Output()
		return string(b), err
	}
	key := func(door, name string) string {
		if door == "s3" {
			return urls[door] + "/data/" + name
		}
		return urls[door] + "/local/data/" + name
	}
	write := map[string]func(name, content string) error{
		"mount": func(name, content string) error {
			return os.WriteFile(filepath.Join(mnt, "local", "data", name), []byte(content), 0o644)
		},
		"s3": func(name, content string) error {
			src := filepath.Join(dir, "src-"+name)
			os.WriteFile(src, []byte(content), 0o644)
			out, err := exec.Command("s3cmd", "-c", s3cfg, "put", src, "s3://data/"+name).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		},
	}
	smb := func(share, cmds string) error {
		host, port, _ := strings.Cut(smbAddr, ":")
		cmd := exec.Command("smbclient", "//"+host+"/"+share, "-p", port, "-U", "admin%admin-password", "-c", cmds)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err == nil && strings.Contains(string(out), "NT_STATUS") {
			err = fmt.Errorf("%s", out)
		}
		return err
	}
	// The smb door writes through the export of --smb-export, and reads
	// through the domain's share.
	if !strings.Contains(p.output(), "smb share /local/data at smb://"+smbAddr+"/data\n") {
		t.Fatalf("pando up does not say where --smb-export serves /local/data:\n%s", p.output())
	}
	write["smb"] = func(name, content string) error {
		os.WriteFile(filepath.Join(dir, "src-"+name), []byte(content), 0o644)
		return smb("data", "put src-"+name+" "+name)
	}
	for _, door := range []string{"http", "webdav"} {
		write[door] = func(name, content string) error {
			src := filepath.Join(dir, "src-"+name)
			os.WriteFile(src, []byte(content), 0o644)
			_, err := curl(door, "-o", "/dev/null", "-T", src, key(door, name))
			return err
		}
	}
	nfsURL := func(name string) string {
		return "nfs://127.0.0.1/local/data/" + name + "?mountport=" + nfsPort[1] + "&nfsport=" + nfsPort[1] + "&version=3"
	}
	write["nfs"] = func(name, content string) error {
		src := filepath.Join(dir, "src-"+name)
		os.WriteFile(src, []byte(content), 0o644)
		if out, err := exec.Command("nfs-cp", src, nfsURL(name)).CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	read := func(door, name string) (string, error) {
		switch door {
		case "mount":
			b, err := os.ReadFile(filepath.Join(mnt, "local", "data", name))
			return string(b), err
		case "nfs":
			b, err := exec.Command("nfs-cat", nfsURL(name)).Output()
			return string(b), err
		}
		if door == "smb" {
			os.Remove(filepath.Join(dir, "got-"+name))
			if err := smb("local", "get data\\"+name+" got-"+name); err != nil {
				return "", err
			}
			b, err := os.ReadFile(filepath.Join(dir, "got-"+name))
			return string(b), err
		}
		return curl(door, key(door, name))
	}
	doors := []string{"mount", "http", "webdav", "s3", "nfs", "smb"}
	var table []string
	for _, w := range doors {
		name, content := "from-"+w+".txt", "written through "+w+"\n"
		if err := write[w](name, content); err != nil {
			t.Fatalf("writing through %s: %v", w, err)
		}
		start := time.Now()
		for _, r := range doors {
			if r == w {
				continue
			}
			var got string
			var err error
			for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
				if got, err = read(r, name); err == nil && got == content {
					break
				}
			}
			if got != content {
				t.Errorf("%s's file through %s after 15 s: %q %v", w, r, got, err)
			}
			table = append(table, fmt.Sprintf("%s -> %s %v", w, r, time.Since(start).Round(10*time.Millisecond)))
		}
	}
	t.Logf("seen after (window=3s everywhere): %s", strings.Join(table, ", "))
	if b, _ := os.ReadFile(filepath.Join(data, "from-s3.txt")); string(b) != "written through s3\n" {
		t.Errorf("the share holds %q", b)
	}
	if _, err := os.Stat(filepath.Join(state, "gateway.json")); err != nil {
		t.Errorf("the gateway's credentials were not kept: %v", err)
	}
}
