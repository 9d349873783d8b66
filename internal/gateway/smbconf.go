package gateway

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// confSafe refuses a directory that Samba's configuration cannot name
// as it is: Samba substitutes %-sequences in paths, and a line ends a
// value.
func confSafe(dir string) error {
	if strings.ContainsAny(dir, "%\n\r\\\"") || strings.TrimSpace(dir) != dir {
		return fmt.Errorf("%q holds a character Samba's configuration cannot hold in a path (%%, a line break, a backslash, a quote); choose another", dir)
	}
	return nil
}

// SMBExport is a folder of the namespace served as a share of its own:
// \\gw\Name is the folder Path.
type SMBExport struct {
	Name string // the share's name, as clients give it
	Path string // a global path, /<domain>/...
}

// smbReserved are the names Samba gives sections of its own meaning.
var smbReserved = []string{"global", "homes", "printers", "print$", "ipc$"}

// ParseSMBExports reads NAME=PATH exports of the gateway of domain
// (checkSMBExports).
func ParseSMBExports(domain string, specs []string) ([]SMBExport, error) {
	var exs []SMBExport
	for _, s := range specs {
		name, p, ok := strings.Cut(s, "=")
		if !ok || name == "" || p == "" {
			return nil, fmt.Errorf("export %q: give NAME=PATH, e.g. data=/%s/data", s, domain)
		}
		exs = append(exs, SMBExport{Name: name, Path: p})
	}
	return exs, checkSMBExports(domain, exs)
}

// checkSMBExports refuses exports Samba's configuration cannot hold as
// they are: each name must be a share name Samba and Windows clients take
// (letters, digits, '-', '_', '.', inner spaces, a '$' at the end for a
// share not listed; at most 80 characters), none twice in any letters,
// none of Samba's own sections nor the domain's share; each path a clean
// global path in domain without a character Samba substitutes or ends a
// value at.
func checkSMBExports(domain string, exs []SMBExport) error {
	seen := map[string]bool{strings.ToLower(domain): true}
	for _, ex := range exs {
		s := ex.Name + "=" + ex.Path
		if err := smbShareName(ex.Name); err != nil {
			return fmt.Errorf("export %q: %w", s, err)
		}
		low := strings.ToLower(ex.Name)
		if slices.Contains(smbReserved, low) {
			return fmt.Errorf("export %q: %s is a name Samba keeps for itself; choose another", s, ex.Name)
		}
		if seen[low] {
			return fmt.Errorf("export %q: a share named %s (in any letters) is already served; choose another name", s, ex.Name)
		}
		seen[low] = true
		p := ex.Path
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p || (p != "/"+domain && !strings.HasPrefix(p, "/"+domain+"/")) ||
			strings.ContainsFunc(p, unicode.IsControl) || confSafe(p) != nil {
			return fmt.Errorf("export %q: the path must be a clean global path of domain %s, e.g. /%s/data, without %%, backslashes, quotes or control characters", s, domain, domain)
		}
	}
	return nil
}

// smbShareName refuses a name that Samba's configuration or a Windows
// client would not take, or take as something else, as a share's.
func smbShareName(name string) error {
	const bad = "a share name is 1 to 80 letters, digits, '-', '_', '.' or inner spaces, with an optional '$' at the end; choose another"
	base := strings.TrimSuffix(name, "$")
	if base == "" || utf8.RuneCountInString(name) > 80 || !utf8.ValidString(name) || strings.TrimSpace(base) != base ||
		strings.HasPrefix(base, ".") {
		return errors.New(bad)
	}
	for _, r := range base {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '-' && r != '_' && r != '.' && r != ' ' {
			return errors.New(bad)
		}
	}
	return nil
}

// smbConf is Samba's configuration: every file Samba keeps is below dir,
// it listens on ip:port only, and serves the domain and each export as a
// share, whose path is in the mount of the user who signed in.
func smbConf(dir, domain string, ip net.IP, port, encrypt string, exports []SMBExport) string {
	sd := filepath.Join(dir, "samba")
	var b strings.Builder
	w := func(k, v string) { fmt.Fprintf(&b, "\t%s = %s\n", k, v) }
	b.WriteString("# Written by pando serve smb at each start; changes here are lost.\n[global]\n")
	w("server role", "standalone server")
	w("security", "user")
	w("server string", "pando gateway")
	w("passdb backend", "smbpasswd:"+filepath.Join(sd, "private", "smbpasswd"))
	for _, d := range [][2]string{{"private dir", "private"}, {"lock directory", "lock"}, {"state directory", "state"},
		{"cache directory", "cache"}, {"pid directory", "pid"}, {"ncalrpc dir", "ncalrpc"}} {
		w(d[0], filepath.Join(sd, d[1]))
	}
	w("smb ports", port)
	if !ip.IsUnspecified() {
		w("interfaces", ip.String())
		w("bind interfaces only", "yes")
	}
	w("disable netbios", "yes")
	// samba-dcerpcd is run by the gateway (in its process group), not
	// started by smbd on its own.
	w("rpc start on demand helpers", "no")
	// SMB 3 only: sessions signed, and encrypted unless --encrypt
	// desired lets a client without encryption in.
	w("server min protocol", "SMB3_00")
	w("server signing", "mandatory")
	w("server smb encrypt", encrypt)
	w("ntlm auth", "ntlmv2-only")
	w("restrict anonymous", "2")
	w("map to guest", "never")
	w("usershare path", "")
	w("load printers", "no")
	w("printing", "bsd")
	w("printcap name", "/dev/null")
	w("disable spoolss", "yes")
	w("host msdfs", "no")
	// Clients cache nothing on their own (no oplocks, no leases): what
	// they see is the gateway's vfs, within its consistency mode's bound.
	w("oplocks", "no")
	w("level2 oplocks", "no")
	w("smb2 leases", "no")
	w("kernel oplocks", "no")
	w("kernel share modes", "no")
	// DOS attributes (hidden, read-only, archive, the creation time)
	// and a client's extended attributes are kept at the share as user.*
	// extended attributes (user.DOSATTRIB, user.NAME), which the vfs
	// carries to the share and every mount sees; without them Samba
	// makes up attributes from modes and refuses EAs. No NT ACLs made
	// from modes: rights are pando's.
	w("store dos attributes", "yes")
	w("ea support", "yes")
	w("nt acl support", "no")
	w("map archive", "no")
	w("map hidden", "no")
	w("map system", "no")
	w("map readonly", "no")
	// Names are matched as they are, as at the shares: else Samba lists
	// the whole directory to look for a name in other letters at every
	// name it does not find (each create), which is O(n) per file.
	w("case sensitive", "yes")
	w("preserve case", "yes")
	w("short preserve case", "yes")
	// Byte-range locks are not tested at every read and write (each test
	// would be a lock request to the share); they stay advisory, as on
	// Unix.
	w("strict locking", "no")
	w("unix extensions", "no")
	w("wide links", "no")
	w("allow insecure wide links", "no")
	share(&b, dir, domain, "pando domain "+domain, "/"+domain)
	for _, ex := range exports {
		share(&b, dir, ex.Name, "pando "+ex.Path, ex.Path)
	}
	return b.String()
}

// share writes the section of share name, the global path gpath in the
// mount of the user who signed in.
func share(b *strings.Builder, dir, name, comment, gpath string) {
	w := func(k, v string) { fmt.Fprintf(b, "\t%s = %s\n", k, v) }
	fmt.Fprintf(b, "\n[%s]\n", name)
	w("comment", comment)
	// %U is the name the user signed in with, which is the name of
	// their mount. A user with no mount there reaches nothing: the path
	// is inside the mount.
	w("path", filepath.Join(dir, "mnt", "%U", gpath))
	w("force user", "root")
	w("force group", "root")
	w("read only", "no")
	w("guest ok", "no")
	w("browseable", "yes")
	w("create mask", "0644")
	w("directory mask", "0755")
}

// writeSambaUsers gives Samba its users: the passwd and group files
// nss_wrapper shows Samba's processes (root, whom the share acts as,
// nobody, and each user with their uid), and the smbpasswd file of those
// users, from the password file's content raw.
func writeSambaUsers(sd string, users []SMBUser, raw []byte) error {
	var pw strings.Builder
	pw.WriteString("root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
	keep := map[string]bool{}
	for _, u := range users {
		fmt.Fprintf(&pw, "%s:x:%d:65534:pando user %s:/nonexistent:/usr/sbin/nologin\n", u.Name, u.UID, u.Name)
		keep[u.Name] = true
	}
	var sp strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		if name, _, _ := strings.Cut(line, ":"); keep[name] {
			sp.WriteString(line + "\n")
		}
	}
	for _, f := range []struct{ name, content string }{
		{"passwd", pw.String()},
		{"group", "root:x:0:\nnogroup:x:65534:\n"},
		{"private/smbpasswd", sp.String()},
	} {
		p := filepath.Join(sd, f.name)
		if err := os.WriteFile(p+".tmp", []byte(f.content), 0o600); err != nil {
			return err
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			return err
		}
	}
	return nil
}
