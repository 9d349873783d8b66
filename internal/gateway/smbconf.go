package gateway

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
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

// smbConf is Samba's configuration: every file Samba keeps is below dir,
// it listens on ip:port only, and serves one share, the domain, whose
// path is the mount of the user who signed in.
func smbConf(dir, domain string, ip net.IP, port, encrypt string) string {
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
	// Files are what pando keeps: no DOS attributes in extended
	// attributes, no NT ACLs made from modes. Rights are pando's.
	w("store dos attributes", "no")
	w("ea support", "no")
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
	fmt.Fprintf(&b, "\n[%s]\n", domain)
	w("comment", "pando domain "+domain)
	// %U is the name the user signed in with, which is the name of
	// their mount. A user with no mount there reaches nothing: the path
	// is inside the mount.
	w("path", filepath.Join(dir, "mnt", "%U", domain))
	w("force user", "root")
	w("force group", "root")
	w("read only", "no")
	w("guest ok", "no")
	w("browseable", "yes")
	w("create mask", "0644")
	w("directory mask", "0755")
	return b.String()
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
