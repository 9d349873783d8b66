package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/testenv"
	"pando.dev/pando/internal/wire"
)

// hostileShare registers a share named name with the domain's controller,
// as a real share would, but serves listings of its own making: whatever
// list returns at the time of the request.
func hostileShare(t *testing.T, d *testenv.Domain, name string, list func() (wire.ReadDirResp, []byte)) {
	t.Helper()
	ctx := context.Background()
	admin := d.Client(d.Admin)
	key, keyPEM, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := auth.NewCSR(key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var reg wire.ShareRegisterResp
	if err := admin.ControllerCall(ctx, wire.OpShareRegister, wire.ShareRegisterReq{Name: name, Addrs: []string{ln.Addr().String()}, CSR: csr}, &reg); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(reg.Cert, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(reg.CA)
	dir := wire.Attr{Ino: 1, Mode: 0o40755, Nlink: 2, Version: 1}
	srv := &rpc.Server{TLS: auth.ServerConfig(cert, pool), Log: slog.New(slog.DiscardHandler),
		Handler: rpc.HandlerFunc(func(ctx context.Context, req *rpc.Request) (rpc.Reply, error) {
			switch req.Op {
			case wire.OpAuth:
				return rpc.Reply{Msg: wire.AuthResp{Tok: 1, Expires: time.Now().Add(time.Hour).UnixNano()}}, nil
			case wire.OpGetAttr:
				return rpc.Reply{Msg: wire.AttrResp{Attr: dir}}, nil
			case wire.OpReadDir:
				resp, data := list()
				resp.Dir = dir
				return rpc.Reply{Msg: resp, Data: data}, nil
			}
			return rpc.Reply{}, wire.Errorf(wire.CodeNotSupp, "not served here")
		})}
	go srv.Serve(tls.NewListener(ln, srv.TLS))
	t.Cleanup(func() { srv.Close() })
	if err := admin.Admin().MountAdd(ctx, "/"+d.Ctrl.Domain()+"/"+name, name, ""); err != nil {
		t.Fatal(err)
	}
}

// TestHostileListingRefused: a share that lists names outside the
// directory, or a name twice, has its listing refused whole, with a
// message naming the share and the entry; the same share's honest
// listing is taken.
func TestHostileListingRefused(t *testing.T) {
	d := testenv.New(t, "h")
	var mu sync.Mutex
	var entries []wire.DirEntry
	var data []byte
	hostileShare(t, d, "evil", func() (wire.ReadDirResp, []byte) {
		mu.Lock()
		defer mu.Unlock()
		return wire.ReadDirResp{Entries: entries}, data
	})
	serve := func(es []wire.DirEntry, d []byte) {
		mu.Lock()
		entries, data = es, d
		mu.Unlock()
	}
	c := d.Client(d.Admin)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	file := func(name string) wire.DirEntry {
		return wire.DirEntry{Name: name, Attr: wire.Attr{Ino: 5, Mode: 0o100644, Nlink: 1, Size: 1, Version: 1}, Data: true}
	}

	serve([]wire.DirEntry{file("a"), file("b")}, []byte("ab"))
	got, _, contents, err := c.ReadDirData(ctx, "/h/evil", 64<<10, 1<<20)
	if err != nil || len(got) != 2 || string(contents["a"]) != "a" || string(contents["b"]) != "b" {
		t.Fatalf("honest listing: %v, %v, %q", err, got, contents)
	}
	for _, bad := range [][]wire.DirEntry{
		{file("a"), file("../../other/x")},
		{file("a/b")},
		{file("..")},
		{file("")},
		{file("a"), file("a")},
	} {
		serve(bad, []byte("xx")[:len(bad)])
		got, _, contents, err := c.ReadDirData(ctx, "/h/evil", 64<<10, 1<<20)
		name := bad[len(bad)-1].Name
		if wire.CodeOf(err) != wire.CodeIO || !strings.Contains(err.Error(), "share evil") || !strings.Contains(err.Error(), "/h/evil") {
			t.Errorf("entry %q: %v", name, err)
		}
		if got != nil || contents != nil {
			t.Errorf("entry %q: a refused listing handed on %v, %v", name, got, contents)
		}
	}
}
