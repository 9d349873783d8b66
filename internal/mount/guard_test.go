package mount

import (
	"os"
	"os/user"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// handleOps are the requests guard lets through for any uid: they come
// through a descriptor an admitted uid opened, or from the kernel itself.
var handleOps = []string{"String", "SetDebug", "Init", "OnUnmount", "Forget",
	"Read", "Write", "Writev", "Lseek", "GetLk", "SetLk", "SetLkw", "Release", "CopyFileRange", "Ioctl",
	"Flush", "Fsync", "Fallocate", "ReadDir", "ReadDirPlus", "ReleaseDir", "FsyncDir"}

// callGuard calls method name of g with a request from uid about node,
// with flags set in a GetAttrIn or StatxIn; it reports whether the call
// reached the file system behind the guard (which is nil, so that
// reaching it panics) and the status the guard gave otherwise.
func callGuard(t *testing.T, g *guard, name string, uid uint32, node uint64, flags uint32) (reached bool, st fuse.Status) {
	t.Helper()
	m := reflect.ValueOf(g).MethodByName(name)
	hdr := fuse.InHeader{NodeId: node, Caller: fuse.Caller{Owner: fuse.Owner{Uid: uid, Gid: uid}}}
	args := make([]reflect.Value, m.Type().NumIn())
	for i := range args {
		at := m.Type().In(i)
		v := reflect.New(at).Elem()
		if at.Kind() == reflect.Pointer && at.Elem().Kind() == reflect.Struct {
			v = reflect.New(at.Elem())
			if at.Elem() == reflect.TypeOf(hdr) {
				v.Elem().Set(reflect.ValueOf(hdr))
			} else if f := v.Elem().FieldByName("InHeader"); f.IsValid() {
				f.Set(reflect.ValueOf(hdr))
				for _, fl := range []string{"Flags_", "GetattrFlags"} {
					if f := v.Elem().FieldByName(fl); f.IsValid() {
						f.SetUint(uint64(flags))
					}
				}
			}
		}
		args[i] = v
	}
	defer func() {
		if recover() != nil {
			reached = true
		}
	}()
	for _, out := range m.Call(args) {
		if s, ok := out.Interface().(fuse.Status); ok {
			st = s
		}
	}
	return false, st
}

// TestGuard: every request that names a file is refused with EACCES for
// a uid the mount is not lent to, without reaching the file system; the
// same requests from the mounting uid and a lent uid reach it; what only
// a descriptor or the kernel sends reaches it for anyone; the root's
// attributes and statfs answer anyone.
func TestGuard(t *testing.T) {
	g := &guard{admit: []uint32{0, 1001}}
	rt := reflect.TypeOf((*fuse.RawFileSystem)(nil)).Elem()
	refused := 0
	for i := range rt.NumMethod() {
		name := rt.Method(i).Name
		for _, uid := range []uint32{0, 1001} {
			if reached, st := callGuard(t, g, name, uid, 7, 0); !reached {
				t.Errorf("%s from admitted uid %d: not served (%v)", name, uid, st)
			}
		}
		reached, st := callGuard(t, g, name, 1002, 7, 0)
		switch {
		case slices.Contains(handleOps, name):
			if !reached {
				t.Errorf("%s through a descriptor: refused (%v)", name, st)
			}
		case reached:
			t.Errorf("%s from uid 1002, not lent to: reached the file system", name)
		case st != fuse.EACCES:
			t.Errorf("%s from uid 1002: %v, want EACCES", name, st)
		default:
			refused++
		}
	}
	if got := g.refused.Load(); got != int64(refused) || refused < 20 {
		t.Errorf("%d refusals counted, %d made", got, refused)
	}
	for _, name := range []string{"GetAttr", "Statx", "StatFs"} {
		if reached, _ := callGuard(t, g, name, 1002, fuse.FUSE_ROOT_ID, 0); !reached {
			t.Errorf("%s of the mount root from any uid: refused", name)
		}
	}
	for _, name := range []string{"GetAttr", "Statx"} {
		if reached, _ := callGuard(t, g, name, 1002, 7, fuse.FUSE_GETATTR_FH); !reached {
			t.Errorf("%s through an open descriptor: refused", name)
		}
	}
}

func TestParseLendTo(t *testing.T) {
	root, err := user.LookupId("0")
	if err != nil {
		t.Skip("no user with uid 0 in the user database")
	}
	got, err := ParseLendTo([]string{"1001", root.Username, " 1001 ", "65534", ""})
	if err != nil || !slices.Equal(got, []uint32{0, 1001, 65534}) {
		t.Errorf("ParseLendTo: %v, %v", got, err)
	}
	for _, bad := range []string{"no-such-user-here", "4294967295", "-1"} {
		_, err := ParseLendTo([]string{bad})
		if err == nil || !strings.Contains(err.Error(), "--lend-to") || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseLendTo(%q): %v", bad, err)
		}
	}
}

// TestAllowOtherOK: an agent not run by root may lend its mount only
// where FUSE's configuration allows other users in, and is told how.
func TestAllowOtherOK(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "fuse.conf")
	if why := allowOtherOK(1000, conf); !strings.Contains(why, "user_allow_other") || !strings.Contains(why, "--lend-to") {
		t.Errorf("no fuse.conf: %q", why)
	}
	os.WriteFile(conf, []byte("# user_allow_other\nmount_max = 1000\n"), 0o644)
	if why := allowOtherOK(1000, conf); why == "" {
		t.Errorf("fuse.conf with the line commented out: allowed")
	}
	os.WriteFile(conf, []byte("mount_max = 1000\n user_allow_other \n"), 0o644)
	if why := allowOtherOK(1000, conf); why != "" {
		t.Errorf("fuse.conf with user_allow_other: %q", why)
	}
	if why := allowOtherOK(0, filepath.Join(dir, "none")); why != "" {
		t.Errorf("root: %q", why)
	}
}
