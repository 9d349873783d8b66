package mount

import (
	"strings"
	"testing"

	"pando.dev/pando/internal/wire"
)

// TestIDMap: names show as local ids and back, as NFSv4 maps them; an
// unknown principal or group is nobody; a setgid directory gives its
// group to what is made in it.
func TestIDMap(t *testing.T) {
	m, err := ParseIDMap([]string{"bob@uva=1001"}, []string{"staff@uva=50"}, "65000:65001")
	if err != nil {
		t.Fatal(err)
	}
	m.Principal, m.Self, m.SelfGroup = "alice@uva", 1000, 100
	for _, c := range []struct {
		owner, group string
		uid, gid     uint32
	}{
		{"", "", 1000, 100},                // no record: the agent's
		{"alice@uva", "", 1000, 100},       // the agent's principal
		{"bob@uva", "staff@uva", 1001, 50}, // mapped
		{"#7", "#8", 7, 8},                 // local ids
		{"carol@uva", "ops@uva", 65000, 65001},
		{"carol@uva", "", 65000, 65001},
	} {
		if u, g := m.uid(c.owner), m.gid(c.owner, c.group); u != c.uid || g != c.gid {
			t.Errorf("%q:%q shows as %d:%d, want %d:%d", c.owner, c.group, u, g, c.uid, c.gid)
		}
	}
	for uid, want := range map[uint32]string{1000: "alice@uva", 1001: "bob@uva", 0: "#0", 65534: "#65534"} {
		if got := m.owner(uid); got != want {
			t.Errorf("uid %d is %q, want %q", uid, got, want)
		}
	}
	if got := m.group(50); got != "staff@uva" {
		t.Errorf("gid 50 is %q", got)
	}
	c := m.creator(1001, 100, wire.Attr{Mode: 0o40000 | 0o2775, Group: "staff@uva"})
	if c.Owner != "bob@uva" || c.Group != "staff@uva" {
		t.Errorf("made in a setgid directory: %+v", c)
	}
	c = m.creator(1001, 100, wire.Attr{Mode: 0o40000 | 0o775, Group: "staff@uva"})
	if c.Owner != "bob@uva" || c.Group != "#100" {
		t.Errorf("made in a plain directory: %+v", c)
	}
	for _, bad := range [][3]string{{"bob@uva", "", ""}, {"#3=1", "", ""}, {"bob@uva=nosuchuserhere", "", ""}, {"", "g=nosuchgrouphere", ""}, {"", "", "nosuchuserhere"}} {
		var users, groups []string
		if bad[0] != "" {
			users = []string{bad[0]}
		}
		if bad[1] != "" {
			groups = []string{bad[1]}
		}
		if _, err := ParseIDMap(users, groups, bad[2]); err == nil || !strings.Contains(err.Error(), "--") {
			t.Errorf("%q: %v, want an error naming the flag", bad, err)
		}
	}
}
