package gateway

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
)

// write puts b in the file at p, mode 0600, with a modification time of
// its own (a second later each call), as an operator's edit would.
func write(t *testing.T, p string, b string, n int) {
	t.Helper()
	if err := os.WriteFile(p, []byte(b), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_700_000_000+int64(n), 0)
	if err := os.Chtimes(p, at, at); err != nil {
		t.Fatal(err)
	}
}

// TestSecretFiles drives the three credential files of a gateway through
// the same life: read, changed (the change is seen), damaged (the
// version before stays in use, and a warning says so), mended, and made
// readable by others (refused, whatever was read before).
func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	alice, err := auth.HashPassword("alice-password")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := auth.HashPassword("bob-password")
	if err != nil {
		t.Fatal(err)
	}
	var smb1, smb2 bytes.Buffer
	for i, f := range []*bytes.Buffer{&smb1, &smb2} {
		p := filepath.Join(dir, "smb-src")
		os.Remove(p)
		for _, u := range []string{"alice", "bob"}[:i+1] {
			if err := SetSMBPassword(p, u, "password-of-"+u); err != nil {
				t.Fatal(err)
			}
		}
		b, _ := os.ReadFile(p)
		f.Write(b)
	}
	for _, c := range []struct {
		name, first, second, damaged string
		// open opens the file; has reports whether user (or access key)
		// is in it, through the type's own methods.
		open func(p string) (has func(who string) bool, tell func(*slog.Logger), err error)
	}{
		{"passwords", "alice:" + alice + "\n", "alice:" + alice + "\nbob:" + bob + "\n", "alice:" + alice + "\nBad Name:x\n",
			func(p string) (func(string) bool, func(*slog.Logger), error) {
				pw, err := OpenPasswords(p)
				if err != nil {
					return nil, nil, err
				}
				return func(u string) bool { return pw.Check(u, u+"-password") }, pw.file.tell, nil
			}},
		{"s3 keys", "KA:alice:secret-a\n", "KA:alice:secret-a\nbob:bob:secret-b\n", "KA:alice:secret-a\nno secret\n",
			func(p string) (func(string) bool, func(*slog.Logger), error) {
				k, err := OpenS3Keys(p)
				if err != nil {
					return nil, nil, err
				}
				return func(who string) bool {
					if who == "alice" {
						who = "KA"
					}
					u, _, ok := k.Secret(who)
					return ok && (u == who || who == "KA" && u == "alice")
				}, k.file.tell, nil
			}},
		{"smb passwords", smb1.String(), smb2.String(), smb1.String() + "bob:12:x\n",
			func(p string) (func(string) bool, func(*slog.Logger), error) {
				f := openSMBPasswd(p)
				if _, err := f.load(); err != nil {
					return nil, nil, err
				}
				return func(u string) bool {
					pw, err := f.load()
					if err != nil {
						return false
					}
					for _, x := range pw.users {
						if x.Name == u {
							return true
						}
					}
					return false
				}, f.tell, nil
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
			write(t, p, c.first, 0)
			os.Chmod(p, 0o640)
			if _, _, err := c.open(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
				t.Fatalf("a file its group may read: %v", err)
			}
			write(t, p, c.damaged, 0)
			if _, _, err := c.open(p); err == nil || !strings.Contains(err.Error(), "line 2") {
				t.Fatalf("a damaged file at first: %v", err)
			}
			write(t, p, c.first, 1)
			has, tell, err := c.open(p)
			if err != nil {
				t.Fatal(err)
			}
			var logged bytes.Buffer
			tell(slog.New(slog.NewTextHandler(&logged, nil)))
			if !has("alice") || has("bob") {
				t.Fatalf("first version: alice %v, bob %v", has("alice"), has("bob"))
			}
			write(t, p, c.second, 2)
			if !has("alice") || !has("bob") {
				t.Fatalf("changed: alice %v, bob %v", has("alice"), has("bob"))
			}
			write(t, p, c.damaged, 3)
			if !has("alice") || !has("bob") || has("carol") {
				t.Fatalf("damaged: alice %v, bob %v (the version before should stay)", has("alice"), has("bob"))
			}
			if n := strings.Count(logged.String(), "does not parse"); n != 1 || !strings.Contains(logged.String(), "line 2") {
				t.Fatalf("a damaged version should be logged once, with its line: %q", logged.String())
			}
			write(t, p, c.first, 4)
			if !has("alice") || has("bob") {
				t.Fatalf("mended: alice %v, bob %v", has("alice"), has("bob"))
			}
			os.Chmod(p, 0o604)
			if has("alice") {
				t.Fatal("a file others may read still used")
			}
			os.Chmod(p, 0o600)
			if !has("alice") {
				t.Fatal("the file made private again is not used")
			}
			os.Remove(p)
			if has("alice") {
				t.Fatal("a removed file still used")
			}
		})
	}
}
