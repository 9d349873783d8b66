package mount

import (
	"context"
	"log/slog"
	"os"
	"regexp"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"

	"pando.dev/pando/internal/vfs"
)

func callerCtx(uid uint32) context.Context {
	return fuse.NewContext(context.Background(), &fuse.Caller{Owner: fuse.Owner{Uid: uid, Gid: uid}})
}

// TestLoginDispatch: a uid logged in is served by its own vfs and
// admitted by the guard, and its principal shows as it; the agent's uid,
// a request with no caller, and a uid after its logout are not.
func TestLoginDispatch(t *testing.T) {
	own, alice, alice2 := new(vfs.FS), new(vfs.FS), new(vfs.FS)
	m := &Mount{v: own, log: slog.New(slog.DiscardHandler)}
	m.ids.Store(&IDMap{Principal: "root@uva", Nobody: DefaultNobody, Users: map[string]uint32{"carol@uva": 7}})
	m.logins.on, m.logins.base = true, m.idmap().Users
	m.guard = &guard{admit: []uint32{0}, m: m}
	hdr := func(uid uint32) *fuse.InHeader {
		return &fuse.InHeader{Caller: fuse.Caller{Owner: fuse.Owner{Uid: uid}}}
	}

	if m.guard.ok(hdr(1001)) || m.vfsFor(callerCtx(1001)) == alice {
		t.Fatal("a uid not logged in is admitted, or served by a login's vfs")
	}
	m.Login(1001, "alice@uva", alice)
	if !m.guard.ok(hdr(1001)) || m.vfsFor(callerCtx(1001)) != alice {
		t.Fatal("the uid logged in is not served by its own vfs")
	}
	if m.vfsFor(callerCtx(0)) != own || m.vfsFor(context.Background()) != own || m.vfsFor(callerCtx(1002)) != own {
		t.Fatal("another uid, or a request with no caller, is served by alice's vfs")
	}
	if m.guard.ok(hdr(1002)) {
		t.Fatal("a uid with no login and not lent is admitted")
	}
	ids := m.idmap()
	if ids.uid("alice@uva") != 1001 || ids.owner(1001) != "alice@uva" || ids.uid("carol@uva") != 7 || ids.uid("root@uva") != 0 {
		t.Fatalf("owners: alice %d, 1001 %q, carol %d", ids.uid("alice@uva"), ids.owner(1001), ids.uid("carol@uva"))
	}
	m.Login(1001, "alice@uva", alice2)
	if m.vfsFor(callerCtx(1001)) != alice2 {
		t.Fatal("a second login does not replace the first")
	}
	if got := m.Logins(); len(got) != 1 || got[1001] != "alice@uva" {
		t.Fatalf("Logins: %v", got)
	}
	// A request admitted before the logout ends on alice's vfs; new ones
	// are refused; the login is dropped once none is under way.
	leave := m.hold(1001)
	v, idle := m.Logout(1001)
	if v != alice2 || idle() {
		t.Fatal("logout did not return the login's vfs, or calls it idle with a request under way")
	}
	if m.guard.ok(hdr(1001)) || m.idmap().uid("alice@uva") != DefaultNobody {
		t.Fatal("a uid logged out is still admitted, or shown as alice")
	}
	if m.vfsFor(callerCtx(1001)) != alice2 {
		t.Fatal("a request under way at the logout moved to another vfs")
	}
	leave()
	if !idle() {
		t.Fatal("the login is not idle once its request ended")
	}
	m.Forget(1001, alice2)
	if m.vfsFor(callerCtx(1001)) != own || len(m.Logins()) != 0 {
		t.Fatal("a login forgotten still serves")
	}
	if v, _ := m.Logout(1001); v != nil {
		t.Fatal("a second logout returned a vfs")
	}

	// A mount without logins never dispatches.
	m.Login(1001, "alice@uva", alice)
	m.logins.on = false
	if m.vfsFor(callerCtx(1001)) != own || m.guard.ok(hdr(1001)) {
		t.Fatal("a mount without --logins served a login")
	}
}

// TestNodesReachVfsThroughCaller: the node operations reach the vfs only
// through node.v(ctx), which picks the caller's; none uses the mount's
// own vfs directly.
func TestNodesReachVfsThroughCaller(t *testing.T) {
	direct := regexp.MustCompile(`\.m\.v\.|\bm\.v\.(GetAttr|ReadDir|Open|Create|Mkdir|Unlink|Rmdir|Rename|Link|Symlink|Readlink|SetAttr|Mknod|StatFS|GetXattr|SetXattr|ListXattr|RemoveXattr|Lock|ReadDirPage|ListingStamp|Paged)\(`)
	allowed := regexp.MustCompile(`\.m\.v\.(KernelTimeout|OpenStatTimeout)\(`) // the mount's options, the same for every vfs
	for _, f := range []string{"node.go", "xattr.go", "pages.go", "dircache.go", "lock.go", "file.go", "attr.go", "passthrough.go", "mount.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, loc := range direct.FindAllIndex(b, -1) {
			if line := b[loc[0]:min(len(b), loc[1]+20)]; !allowed.Match(line) {
				t.Errorf("%s reaches the mount's own vfs directly: %q", f, line)
			}
		}
	}
}
