package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudsoda/go-smb2"

	"pando.dev/pando/internal/testenv"
)

// TestSMBRawTraversal sends paths with .. to Samba as they are (smbclient
// folds them before sending; go-smb2, rclone's SMB client, does not):
// reads, writes and directories that climb out of the share, into the
// gateway's directory or another user's mount, are refused by Samba,
// nothing is made or read outside, and the session serves on.
func TestSMBRawTraversal(t *testing.T) {
	d := newDomain(t, "d")
	root := d.addShare("data")
	d.addUser("alice")
	d.addUser("bob")
	d.pando(d.admin, "acl", "set", "/d/data", "alice", "rlidwk", "bob", "rl").ok()
	os.WriteFile(filepath.Join(root, "pre.txt"), []byte("made at the share\n"), 0o644)
	s := startSMB(t, d, "alice:alice-password", "bob:bob-password")
	dl := &smb2.Dialer{Initiator: &smb2.NTLMInitiator{User: "alice", Password: "alice-password"}}
	c, err := dl.Dial(context.Background(), s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Logoff()
	fs, err := c.Mount(`\\127.0.0.1\` + s.share)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Umount()
	serving := func(after string) {
		t.Helper()
		if b, err := fs.ReadFile(`data\pre.txt`); err != nil || string(b) != "made at the share\n" {
			t.Fatalf("after %s: %q %v", after, b, err)
		}
	}
	serving("signing in")
	before := testenv.Tree(t, root)
	outside := filepath.Join(os.TempDir(), fmt.Sprintf("pando-smb-esc-%d", time.Now().UnixNano()))
	rel, _ := filepath.Rel(filepath.Join(s.cacheDir, "smb", "mnt", "alice", "d"), outside)
	up := strings.ReplaceAll(rel, "/", `\`) // ..\..\..\tmp\pando-smb-esc-...
	// A .. that stays inside the share is Samba's to resolve.
	if b, err := fs.ReadFile(`data\..\data\pre.txt`); err != nil || string(b) != "made at the share\n" {
		t.Errorf(`read data\..\data\pre.txt: %q %v`, b, err)
	}
	for _, p := range []string{`..\..\..\..\..\..\..\..\etc\passwd`, `data\..\..\..\..\..\..\..\..\etc\passwd`,
		`..\bob\d\data\pre.txt`, `..\..\samba\smb.conf`, `..\..\samba\private\smbpasswd`, `data\..\..\d\data\pre.txt`} {
		if b, err := fs.ReadFile(p); err == nil {
			t.Errorf("read %s: %d bytes", p, len(b))
		} else {
			t.Logf("read %s: %v", p, err)
		}
		serving("read " + p)
	}
	for _, p := range []string{up, `..\..\..\esc.txt`, `data\..\..\esc.txt`, `..\bob\d\data\esc.txt`} {
		if err := fs.WriteFile(p, []byte("escape\n"), 0o644); err == nil {
			t.Errorf("wrote %s", p)
		} else {
			t.Logf("write %s: %v", p, err)
		}
		if err := fs.Mkdir(p+"-dir", 0o755); err == nil {
			t.Errorf("made directory %s-dir", p)
		}
		if _, err := fs.ReadDir(p + `\..`); err == nil {
			t.Errorf("listed %s\\..", p)
		}
		serving("write " + p)
	}
	if _, err := os.Lstat(outside); err == nil {
		os.RemoveAll(outside)
		t.Errorf("%s was made", outside)
	}
	if _, err := os.Lstat(outside + "-dir"); err == nil {
		os.RemoveAll(outside + "-dir")
		t.Errorf("%s-dir was made", outside)
	}
	for _, dir := range []string{filepath.Join(s.cacheDir, "smb"), filepath.Join(s.cacheDir, "smb", "mnt"), filepath.Join(s.cacheDir, "smb", "mnt", "alice")} {
		if _, err := os.Lstat(filepath.Join(dir, "esc.txt")); err == nil {
			t.Errorf("esc.txt was made in %s", dir)
		}
	}
	if after := testenv.Tree(t, root); !maps.Equal(before, after) {
		t.Errorf("the share changed:\nbefore %v\nafter  %v", before, after)
	}
}
