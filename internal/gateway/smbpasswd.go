package gateway

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"

	"pando.dev/pando/internal/auth"
)

// The SMB gateway's password file is Samba's own smbpasswd file (the
// passdb backend "smbpasswd", docs/gateways.md): one line per user,
//
//	alice:2000001:XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX:NTHASH:[U          ]:LCT-5F3A2B1C:
//
// where NTHASH is the NT hash SMB's NTLMv2 sign-in needs: MD4 of the
// password in UTF-16LE, unsalted, which is what Samba keeps in any of its
// backends. No LanMan hash is kept. The uid is the user's in the passwd
// file the gateway gives Samba (smbUIDBase and up); no account of the
// host is used.

// smbUIDBase is the first uid given to an SMB user. Samba's smbpasswd
// backend makes a user's RID 2*uid+1000, which must fit 32 bits.
const smbUIDBase = 2_000_001

// SMBUser is a user of the SMB password file.
type SMBUser struct {
	Name string
	UID  uint32
}

// ReadSMBUsers reads the users of the SMB password file at path, which
// must not be readable by others.
func ReadSMBUsers(path string) ([]SMBUser, error) {
	p, err := openSMBPasswd(path).load()
	if err != nil {
		return nil, err
	}
	return p.users, nil
}

// smbPasswd is one version of the SMB password file: its users, and its
// bytes, which Samba is given.
type smbPasswd struct {
	users []SMBUser
	raw   []byte
}

// openSMBPasswd is the SMB password file at path; a new *smbPasswd each
// time it is read again.
func openSMBPasswd(path string) *secretFile[*smbPasswd] {
	return newSecretFile("the SMB password file", path, func(b []byte) (*smbPasswd, error) {
		users, err := parseSMBPasswd(path, b)
		if err != nil {
			return nil, err
		}
		return &smbPasswd{users: users, raw: b}, nil
	})
}

func parseSMBPasswd(path string, b []byte) ([]SMBUser, error) {
	var out []SMBUser
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		var uid uint64
		bad := len(f) < 6 || auth.ValidName(f[0]) != nil || seen[f[0]] || len(f[3]) != 32
		if !bad {
			var err error
			uid, err = strconv.ParseUint(f[1], 10, 32)
			_, herr := hex.DecodeString(f[3])
			bad = err != nil || herr != nil || uid < smbUIDBase || uid >= 1<<31
		}
		if bad {
			return nil, fmt.Errorf("the SMB password file %s, line %d: not a line pando serve smb-passwd writes", path, n)
		}
		seen[f[0]] = true
		out = append(out, SMBUser{Name: f[0], UID: uint32(uid)})
	}
	return out, nil
}

// SetSMBPassword sets user's password in the SMB password file at path
// (made, mode 0600, if missing), keeping the user's uid if they have one.
func SetSMBPassword(path, user, pw string) error {
	if err := auth.ValidName(user); err != nil {
		return fmt.Errorf("user name: %w", err)
	}
	if len(pw) < 8 {
		return errors.New("the password is shorter than 8 characters; choose a longer one")
	}
	var lines []string
	uid := uint32(smbUIDBase)
	var own uint32
	if b, err := os.ReadFile(path); err == nil {
		users, err := parseSMBPasswd(path, b)
		if err != nil {
			return err
		}
		for _, u := range users {
			if u.Name == user {
				own = u.UID
			}
			uid = max(uid, u.UID+1)
		}
		for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			if name, _, _ := strings.Cut(line, ":"); name != user && line != "" {
				lines = append(lines, line)
			}
		}
	} else if !os.IsNotExist(err) {
		return fmt.Errorf("the SMB password file: %w", err)
	}
	if own != 0 {
		uid = own
	}
	lines = append(lines, fmt.Sprintf("%s:%d:%s:%X:[U          ]:LCT-%08X:", user, uid, strings.Repeat("X", 32), NTHash(pw), time.Now().Unix()))
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// NTHash is the NT hash of a password: MD4 of its UTF-16LE form.
func NTHash(pw string) [16]byte {
	u := utf16.Encode([]rune(pw))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		binary.LittleEndian.PutUint16(b[2*i:], c)
	}
	return md4(b)
}

// md4 is RFC 1320's MD4, which SMB's NT hash is made with and Go's
// standard library does not have.
func md4(msg []byte) [16]byte {
	a, b, c, d := uint32(0x67452301), uint32(0xefcdab89), uint32(0x98badcfe), uint32(0x10325476)
	n := len(msg)
	pad := make([]byte, 0, n+72)
	pad = append(pad, msg...)
	pad = append(pad, 0x80)
	for len(pad)%64 != 56 {
		pad = append(pad, 0)
	}
	pad = binary.LittleEndian.AppendUint64(pad, uint64(n)*8)
	var x [16]uint32
	for off := 0; off < len(pad); off += 64 {
		for i := range x {
			x[i] = binary.LittleEndian.Uint32(pad[off+4*i:])
		}
		aa, bb, cc, dd := a, b, c, d
		f := func(x, y, z uint32) uint32 { return x&y | ^x&z }
		g := func(x, y, z uint32) uint32 { return x&y | x&z | y&z }
		h := func(x, y, z uint32) uint32 { return x ^ y ^ z }
		for _, i := range [4]int{0, 4, 8, 12} {
			a = bits.RotateLeft32(a+f(b, c, d)+x[i], 3)
			d = bits.RotateLeft32(d+f(a, b, c)+x[i+1], 7)
			c = bits.RotateLeft32(c+f(d, a, b)+x[i+2], 11)
			b = bits.RotateLeft32(b+f(c, d, a)+x[i+3], 19)
		}
		for _, i := range [4]int{0, 1, 2, 3} {
			a = bits.RotateLeft32(a+g(b, c, d)+x[i]+0x5a827999, 3)
			d = bits.RotateLeft32(d+g(a, b, c)+x[i+4]+0x5a827999, 5)
			c = bits.RotateLeft32(c+g(d, a, b)+x[i+8]+0x5a827999, 9)
			b = bits.RotateLeft32(b+g(c, d, a)+x[i+12]+0x5a827999, 13)
		}
		for _, i := range [4]int{0, 2, 1, 3} {
			a = bits.RotateLeft32(a+h(b, c, d)+x[i]+0x6ed9eba1, 3)
			d = bits.RotateLeft32(d+h(a, b, c)+x[i+8]+0x6ed9eba1, 9)
			c = bits.RotateLeft32(c+h(d, a, b)+x[i+4]+0x6ed9eba1, 11)
			b = bits.RotateLeft32(b+h(c, d, a)+x[i+12]+0x6ed9eba1, 15)
		}
		a, b, c, d = a+aa, b+bb, c+cc, d+dd
	}
	var out [16]byte
	binary.LittleEndian.PutUint32(out[0:], a)
	binary.LittleEndian.PutUint32(out[4:], b)
	binary.LittleEndian.PutUint32(out[8:], c)
	binary.LittleEndian.PutUint32(out[12:], d)
	return out
}
