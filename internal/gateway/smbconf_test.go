package gateway

import (
	"net"
	"strings"
	"testing"
)

// TestSMBExports: exports are read as NAME=PATH; a name Samba or Windows
// would not take as it is, one of Samba's own sections, the domain's or
// one given twice in any letters, and a path that is not a clean global
// path of the domain or that Samba's configuration cannot hold are each
// refused with one sentence naming the export; each export accepted is
// a section of Samba's configuration whose path is in the mount of the
// user who signed in.
func TestSMBExports(t *testing.T) {
	exs, err := ParseSMBExports("uva", []string{"data=/uva/data", "Project Data=/uva/data/projects/x y", "hidden$=/uva", "é-1_.x=/uva/a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(exs) != 4 || exs[0] != (SMBExport{Name: "data", Path: "/uva/data"}) || exs[1].Path != "/uva/data/projects/x y" {
		t.Fatalf("parsed %v", exs)
	}
	for _, c := range []struct {
		specs []string
		want  string
	}{
		{[]string{"data"}, "NAME=PATH"},
		{[]string{"=/uva/data"}, "NAME=PATH"},
		{[]string{"data="}, "NAME=PATH"},
		{[]string{"da/ta=/uva/data"}, "share name"},
		{[]string{`da\ta=/uva/data`}, "share name"},
		{[]string{"[data]=/uva/data"}, "share name"},
		{[]string{"da%Uta=/uva/data"}, "share name"},
		{[]string{"da;ta=/uva/data"}, "share name"},
		{[]string{"#data=/uva/data"}, "share name"},
		{[]string{" data=/uva/data"}, "share name"},
		{[]string{"data =/uva/data"}, "share name"},
		{[]string{".data=/uva/data"}, "share name"},
		{[]string{"$=/uva/data"}, "share name"},
		{[]string{"da$ta=/uva/data"}, "share name"},
		{[]string{"da\nta=/uva/data"}, "share name"},
		{[]string{strings.Repeat("x", 81) + "=/uva/data"}, "share name"},
		{[]string{"Global=/uva/data"}, "keeps for itself"},
		{[]string{"IPC$=/uva/data"}, "keeps for itself"},
		{[]string{"homes=/uva/data"}, "keeps for itself"},
		{[]string{"UVA=/uva/data"}, "already served"},
		{[]string{"data=/uva/a", "DATA=/uva/b"}, "already served"},
		{[]string{"data=uva/data"}, "clean global path"},
		{[]string{"data=/"}, "clean global path"},
		{[]string{"data=/other/data"}, "clean global path"},
		{[]string{"data=/uvadata"}, "clean global path"},
		{[]string{"data=/uva/../etc"}, "clean global path"},
		{[]string{"data=/uva/data/"}, "clean global path"},
		{[]string{"data=/uva//data"}, "clean global path"},
		{[]string{"data=/uva/%U"}, "clean global path"},
		{[]string{"data=/uva/a\nb"}, "clean global path"},
		{[]string{`data=/uva/a\b`}, "clean global path"},
		{[]string{`data=/uva/a"b`}, "clean global path"},
		{[]string{"data=/uva/a\tb"}, "clean global path"},
	} {
		_, err := ParseSMBExports("uva", c.specs)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "export ") {
			t.Errorf("%q: %v, want an error with %q", c.specs, err, c.want)
		}
	}

	conf := smbConf("/c/smb", "uva", net.IPv4(127, 0, 0, 1), "445", "required", exs)
	for _, want := range []string{
		"\n[uva]\n\tcomment = pando domain uva\n\tpath = /c/smb/mnt/%U/uva\n",
		"\n[data]\n\tcomment = pando /uva/data\n\tpath = /c/smb/mnt/%U/uva/data\n",
		"\n[Project Data]\n\tcomment = pando /uva/data/projects/x y\n\tpath = /c/smb/mnt/%U/uva/data/projects/x y\n",
		"\n[hidden$]\n\tcomment = pando /uva\n\tpath = /c/smb/mnt/%U/uva\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("Samba's configuration lacks %q:\n%s", want, conf)
		}
	}
	if n := strings.Count(conf, "\tforce user = root\n"); n != 5 {
		t.Errorf("%d shares act as root in their mount, not 5:\n%s", n, conf)
	}
}
