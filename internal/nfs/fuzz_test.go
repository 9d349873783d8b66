package nfs

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
)

// FuzzGuard: the call checker and the handle reader take any bytes
// without panicking; a handle read back names checked names only, and a
// handle made from names reads back as them.
func FuzzGuard(f *testing.F) {
	s, err := New(nil, Config{Exports: []Export{{Path: "/d/data", Principal: "alice"}}, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, nil)
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	e := s.exports["/d/data"]
	f.Add([]byte{}, "a/b")
	f.Add(s.handles.handle(e, []string{"x", "y"}), strings.Repeat("n/", 40)+"z")
	f.Add(binary.BigEndian.AppendUint32(make([]byte, 40), 0xffffffff), "..")
	f.Fuzz(func(t *testing.T, b []byte, p string) {
		_ = checkCall(b)
		if e2, ns, err := s.resolve(b); err == nil {
			if e2 != e {
				t.Fatalf("a handle of another export")
			}
			for _, n := range ns {
				if checkName(n) != nil {
					t.Fatalf("a handle read back as the name %q", n)
				}
			}
		}
		ns := strings.Split(p, "/")
		h := s.handles.handle(e, ns)
		if h == nil {
			return
		}
		if len(h) > fhMax || len(h)%4 != 0 {
			t.Fatalf("a handle of %d bytes", len(h))
		}
		_, back, err := s.resolve(h)
		if err != nil || strings.Join(back, "/") != p {
			t.Fatalf("%q made a handle read back as %q, %v", p, back, err)
		}
	})
}
