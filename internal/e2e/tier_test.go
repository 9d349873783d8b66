package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"pando.dev/pando/internal/store/etcdtest"
)

// startController starts one more controller of d's domain on the store
// named by storeURL, with its own state directory (for its admin bundle),
// and returns it and its address.
func (d *domain) startController(name, storeURL, listen string, extra ...string) (*proc, string) {
	d.t.Helper()
	p, m := start(d.t, `listening on (\S+)`, nil, append([]string{"controller", "--state", filepath.Join(d.dir, name), "--domain", d.name,
		"--listen", listen, "--store", storeURL}, extra...)...)
	return p, m[1]
}

// TestControllerTier: two controllers serve one domain on a 3-member etcd
// cluster. Either answers any request; a user added through one is known
// to the other; the bundles and the agents learn every controller. Two
// mounts (window; callback with write-back) keep working with no failed
// operation (reads, stats, listings, creates, renames) while the etcd
// leader is killed, then the controller they talk to, and both come back;
// users, ACL entries and files put into a second share through the CLI
// meanwhile are all there if acknowledged. A user revoked through one
// controller loses access at a share that watches the other within 2 s.
func TestControllerTier(t *testing.T) {
	c := etcdtest.Start(t, 3)
	dir := t.TempDir()
	d := &domain{t: t, name: "uva", dir: dir, roots: map[string]string{}, shares: map[string]*proc{}}
	ctrlA, addrA := d.startController("ctrl-a", c.URL(), "127.0.0.1:0", "--metrics", "127.0.0.1:0")
	ctrlB, addrB := d.startController("ctrl-b", c.URL(), "127.0.0.1:0")
	adminA, adminB := filepath.Join(dir, "ctrl-a", "admin.json"), filepath.Join(dir, "ctrl-b", "admin.json")
	// B came second: its bundle names A as well.
	var bundle struct {
		Controller  string
		Controllers []string
	}
	b, _ := os.ReadFile(adminB)
	json.Unmarshal(b, &bundle)
	if bundle.Controller != addrB || !strings.Contains(strings.Join(bundle.Controllers, ","), addrA) {
		t.Fatalf("the second controller's bundle names %s and %v, want %s and %s", bundle.Controller, bundle.Controllers, addrB, addrA)
	}
	d.ctrl, d.addr, d.admin = ctrlB, addrB, adminB

	// Either controller answers: a user added through A is known to B,
	// a share registered through B is mounted through A.
	d.pando(adminA, "user", "add", "bob", "-o", filepath.Join(dir, "bob.json")).ok()
	if out := d.pando(adminB, "user", "ls").ok().stdout; !strings.Contains(out, "bob") {
		t.Fatalf("a user added through one controller is not listed by the other:\n%s", out)
	}
	b, _ = os.ReadFile(filepath.Join(dir, "bob.json"))
	json.Unmarshal(b, &bundle)
	if got := append([]string{bundle.Controller}, bundle.Controllers...); !strings.Contains(strings.Join(got, ","), addrA) || !strings.Contains(strings.Join(got, ","), addrB) {
		t.Fatalf("bob's bundle names %v, want both controllers", got)
	}
	// Two agents on share alpha (the default mode, and callback with
	// write-back), registered through B; share beta is written through
	// the CLI.
	w := newCtrlWorkload(t, d, "window", "callback")
	beta := d.addShare("beta")
	d.pando(adminA, "acl", "set", "/uva/alpha", "bob", "rl").ok()
	putTestFile(t, filepath.Join(w.root, "s.txt"), "secret")
	src := filepath.Join(dir, "put.txt")
	putTestFile(t, src, "put through the CLI")

	// Besides the workload's reads and writes, each round renames the
	// file just written, and every fourth one asks the controllers for a
	// change through the CLI (a user, an ACL entry, a file put into
	// beta), alternating: each one acknowledged must be in force at the
	// end.
	var users, acls, puts, renamed []string
	n := 0
	run := func(what string, dur time.Duration) {
		t0 := time.Now()
		for ; time.Since(t0) < dur; n++ {
			w.round(n)
			for _, m := range w.modes {
				dir := filepath.Join(w.agents[m].dir, "uva", "alpha")
				from, to := fmt.Sprintf("%s-%d", m, n), fmt.Sprintf("moved-%s-%d", m, n)
				w.ops++
				if err := os.Rename(filepath.Join(dir, from), filepath.Join(dir, to)); err != nil {
					w.failed = append(w.failed, fmt.Sprintf("%s agent, round %d, rename of %s: %v", m, n, from, err))
				} else {
					renamed = append(renamed, m+" "+to)
				}
			}
			name := fmt.Sprintf("u%d", n)
			switch n % 12 {
			case 0:
				if d.pando(adminB, "user", "add", name, "-o", filepath.Join(dir, name+".json")).code == 0 {
					users = append(users, name)
				}
			case 4:
				if d.pando(adminB, "acl", "set", "/uva/alpha", name, "r").code == 0 {
					acls = append(acls, name)
				}
			case 8:
				if d.pando(adminB, "put", src, "/uva/beta/"+name).code == 0 {
					puts = append(puts, name)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("%s: %d operations so far, %d failed; acknowledged: %d users, %d ACL entries, %d puts, %d renames",
			what, w.ops, len(w.failed), len(users), len(acls), len(puts), len(renamed))
	}
	run("both up", 2*time.Second)
	leader := c.Leader()
	c.Kill(leader)
	run("etcd leader killed", 5*time.Second)
	ctrlB.cmd.Process.Kill()
	<-ctrlB.done
	run("etcd leader and controller B killed", 8*time.Second)
	if out := d.pando(adminB, "user", "ls").ok().stdout; !strings.Contains(out, "bob") {
		t.Errorf("B's admin bundle does not fail over to A:\n%s", out)
	}
	c.Restart(leader)
	ctrlB, _ = d.startController("ctrl-b", c.URL(), addrB) // at its address
	run("both back", 3*time.Second)
	w.check(0, 0)

	// Nothing acknowledged is lost.
	userList := d.pando(adminA, "user", "ls").ok().stdout
	for _, u := range users {
		if !regexp.MustCompile(`(?m)^` + u + `\b`).MatchString(userList) {
			t.Errorf("user %s was added (acknowledged) and is not listed", u)
		}
	}
	aclOut := d.pando(adminA, "acl", "get", "/uva/alpha").ok().stdout
	for _, u := range acls {
		if !regexp.MustCompile(`\b` + u + `\s+r\b`).MatchString(aclOut) {
			t.Errorf("ACL entry %s r on /uva/alpha was set (acknowledged) and is not in force:\n%s", u, aclOut)
		}
	}
	for _, p := range puts {
		if got, err := os.ReadFile(filepath.Join(beta, p)); err != nil || string(got) != "put through the CLI" {
			t.Errorf("/uva/beta/%s was put (acknowledged) and is %q at the share (%v)", p, got, err)
		}
	}
	w.agents["callback"].unmount(t) // it sends what it kept back
	for _, r := range renamed {
		m, to, _ := strings.Cut(r, " ")
		from := strings.Replace(to, "moved-", "", 1)
		if got, err := os.ReadFile(filepath.Join(w.root, to)); err != nil || string(got) != "written "+from {
			t.Errorf("%s agent: %s at the share is %q (%v)", m, to, got, err)
		}
	}
	if len(users) == 0 || len(acls) == 0 || len(puts) == 0 {
		t.Errorf("acknowledged %d users, %d ACL entries, %d puts: the CLI made no change through the faults", len(users), len(acls), len(puts))
	}

	// A's metrics say the same.
	metrics := regexp.MustCompile(`metrics at (\S+)`).FindStringSubmatch(ctrlA.output())
	if metrics == nil {
		t.Fatalf("controller A does not say where its metrics are:\n%s", ctrlA.output())
	}
	resp, err := http.Get(metrics[1])
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`pando_controller_live{controller="` + addrB + `"} 1`, `pando_store_member_up{member="m0"} 1`,
		`pando_store_member_up{member="m2"} 1`, `pando_share_online{share="alpha"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("controller metrics lack %s:\n%s", want, body)
		}
	}
	if n := strings.Count(string(body), "pando_store_member_leader{") - strings.Count(string(body), "pando_store_member_leader{member=\"m0\"} 0") -
		strings.Count(string(body), "pando_store_member_leader{member=\"m1\"} 0") - strings.Count(string(body), "pando_store_member_leader{member=\"m2\"} 0"); n != 1 {
		t.Errorf("controller metrics show %d leaders:\n%s", n, body)
	}

	// Either controller shows both controllers, the three etcd members
	// (one leader) and the share up, whichever controller it watches.
	for _, adm := range []string{adminA, adminB} {
		out := d.pando(adm, "status").ok().stdout
		if strings.Count(out, " up ") < 2 || !strings.Contains(out, addrA) || !strings.Contains(out, addrB) ||
			strings.Count(out, "leader") != 1 || strings.Count(out, "follower") != 2 || !regexp.MustCompile(`alpha\s+up`).MatchString(out) {
			t.Errorf("pando status:\n%s", out)
		}
	}

	// bob and dave read through the share; bob is revoked through A and
	// dave through B. The share watches one of them: one revocation
	// reaches it through the store from the other controller.
	d.pando(adminB, "user", "add", "dave", "-o", filepath.Join(dir, "dave.json")).ok()
	d.pando(adminB, "acl", "set", "/uva/alpha", "dave", "rl").ok()
	for _, u := range []struct{ name, admin string }{{"bob", adminA}, {"dave", adminB}} {
		a := mountAgent(t, filepath.Join(dir, u.name+".json"), "--consistency", "strict") // every read asks the share
		p := filepath.Join(a.dir, "uva", "alpha", "s.txt")
		if got, err := os.ReadFile(p); err != nil || string(got) != "secret" {
			t.Fatalf("%s reads %q, %v", u.name, got, err)
		}
		d.pando(u.admin, "user", "revoke", u.name).ok()
		revoked := time.Now()
		for {
			if _, err := os.ReadFile(p); err != nil {
				break
			}
			if time.Since(revoked) > 2*time.Second {
				t.Fatalf("%s still reads through the mount %v after being revoked", u.name, time.Since(revoked))
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("%s lost access %v after the revocation", u.name, time.Since(revoked).Round(time.Millisecond))
	}
}

// TestControllersRace: two controllers on one store asked at once to add
// one user, add one mount and change one ACL: exactly one user and one
// mount are made (the other request is told it exists), and both
// controllers then give the same answers.
func TestControllersRace(t *testing.T) {
	c := etcdtest.Start(t, 3)
	dir := t.TempDir()
	d := &domain{t: t, name: "uva", dir: dir, roots: map[string]string{}, shares: map[string]*proc{}}
	_, _ = d.startController("ctrl-a", c.URL(), "127.0.0.1:0")
	ctrlB, addrB := d.startController("ctrl-b", c.URL(), "127.0.0.1:0")
	d.ctrl, d.addr = ctrlB, addrB
	admins := []string{filepath.Join(dir, "ctrl-a", "admin.json"), filepath.Join(dir, "ctrl-b", "admin.json")}
	d.admin = admins[0]
	d.addShare("alpha")
	for round := range 3 {
		var wg sync.WaitGroup
		res := make([][]result, 2)
		for i, adm := range admins {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i] = []result{
					runPando(t, "", adm, "user", "add", fmt.Sprintf("carol%d", round), "-o", filepath.Join(dir, fmt.Sprintf("carol%d-%d.json", round, i))),
					runPando(t, "", adm, "ns", "mount", fmt.Sprintf("/uva/m%d", round), "alpha"),
					runPando(t, "", adm, "acl", "set", "/uva/alpha", fmt.Sprintf("r%d", round), []string{"r", "rl"}[i]),
				}
			}()
		}
		wg.Wait()
		for j, what := range []string{"user add", "ns mount"} {
			ok := 0
			for i := range 2 {
				if res[i][j].code == 0 {
					ok++
				} else if !strings.Contains(res[i][j].stderr, "already") {
					t.Errorf("round %d: %s through controller %d failed otherwise than 'already there': %s", round, what, i, res[i][j].stderr)
				}
			}
			if ok != 1 {
				t.Errorf("round %d: %s succeeded through %d controllers, want exactly 1", round, what, ok)
			}
		}
		var acls []string
		for _, adm := range admins {
			acls = append(acls, runPando(t, "", adm, "acl", "get", "/uva/alpha").ok().stdout)
		}
		if acls[0] != acls[1] || !strings.Contains(acls[0], fmt.Sprintf("r%d", round)) {
			t.Errorf("round %d: the controllers give different ACLs:\n%s\n---\n%s", round, acls[0], acls[1])
		}
	}
}

// TestMountTablePushed: a mount added or removed through the controller
// reaches an agent at once, through the controller's mount-watch stream,
// where it kept the table it holds for 5 s before: with a 1 s window the
// new mount shows (and the removed one goes) within 3 s of the change,
// each time right after the agent used its table.
func TestMountTablePushed(t *testing.T) {
	d := newDomain(t, "uva")
	d.addShare("alpha")
	a := mountAgent(t, d.admin, "--consistency", "window=1s")
	dir := filepath.Join(a.dir, "uva")
	a.settle(t, filepath.Join(dir, "alpha"))
	wait := func(p string, present bool) time.Duration {
		t.Helper()
		t0 := time.Now()
		for {
			_, err := os.Stat(p)
			if (err == nil) == present {
				return time.Since(t0)
			}
			if time.Since(t0) > 3*time.Second {
				t.Fatalf("%s still %v 3 s after the mount table changed", p, map[bool]string{true: "absent", false: "present"}[present])
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := range 3 {
		name := fmt.Sprintf("m%d", i)
		os.ReadDir(filepath.Join(dir, "alpha")) // the agent has just used its table
		d.pando(d.admin, "ns", "mount", "/uva/"+name, "alpha").ok()
		added := wait(filepath.Join(dir, name), true)
		os.ReadDir(filepath.Join(dir, "alpha"))
		d.pando(d.admin, "ns", "unmount", "/uva/"+name).ok()
		removed := wait(filepath.Join(dir, name), false)
		t.Logf("mount %s seen %v after it was added, gone %v after it was removed", name, added.Round(time.Millisecond), removed.Round(time.Millisecond))
	}
}
