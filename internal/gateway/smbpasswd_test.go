package gateway

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMD4 checks md4 against RFC 1320's test suite and NTHash against
// the NT hash Samba's own pdbedit wrote for "alicepass1".
func TestMD4(t *testing.T) {
	for in, want := range map[string]string{
		"":               "31d6cfe0d16ae931b73c59d7e0c089c0",
		"a":              "bde52cb31de33e46245e05fbdbd6fb24",
		"abc":            "a448017aaf21d8525fc10ae87aa6729d",
		"message digest": "d9130a8164549fe818874806e1c7014b",
		"12345678901234567890123456789012345678901234567890123456789012345678901234567890": "e33b4ddc9c38f2199c3e7b164fcc0536",
	} {
		got := md4([]byte(in))
		if hex.EncodeToString(got[:]) != want {
			t.Errorf("md4(%q) = %x, want %s", in, got, want)
		}
	}
	if h := NTHash("alicepass1"); strings.ToUpper(hex.EncodeToString(h[:])) != "39EB65335AACFF5D3C0593893C610997" {
		t.Errorf("NTHash = %X", h)
	}
}

// TestSMBPasswd: users keep their uid when their password changes, new
// ones get the next; bad names, short passwords and a file others may
// read are refused.
func TestSMBPasswd(t *testing.T) {
	p := filepath.Join(t.TempDir(), "smbpasswd")
	for _, u := range []string{"alice", "bob", "alice"} {
		if err := SetSMBPassword(p, u, "password-of-"+u); err != nil {
			t.Fatal(err)
		}
	}
	users, err := ReadSMBUsers(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(users) != 2 || users[0] != (SMBUser{"bob", smbUIDBase + 1}) || users[1] != (SMBUser{"alice", smbUIDBase}) {
		t.Errorf("users %v", users)
	}
	for _, u := range []string{"Alice", "../x", "a:b", ""} {
		if err := SetSMBPassword(p, u, "long enough"); err == nil {
			t.Errorf("user %q taken", u)
		}
	}
	if err := SetSMBPassword(p, "carol", "short"); err == nil {
		t.Error("a short password taken")
	}
	os.Chmod(p, 0o644)
	if _, err := ReadSMBUsers(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a file others may read: %v", err)
	}
	os.WriteFile(p, []byte("alice:12:x\n"), 0o600)
	if _, err := ReadSMBUsers(p); err == nil {
		t.Error("a malformed line taken")
	}
}
