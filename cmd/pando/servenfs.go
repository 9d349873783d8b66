package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/cli"
	"pando.dev/pando/internal/gateway"
	"pando.dev/pando/internal/nfs"
)

// nfsConfig reads --export and --allow.
func (f *gatewayFlags) nfsConfig() (nfs.Config, error) {
	var cfg nfs.Config
	if len(f.exports) == 0 {
		return cfg, cli.Usagef("the NFS gateway needs an export: --export PATH=PRINCIPAL (e.g. --export /uva/data=alice)")
	}
	if len(f.allow) == 0 {
		return cfg, cli.Usagef("the NFS gateway needs the client networks it serves: --allow CIDR (e.g. --allow 10.1.0.0/16); NFS clients are not authenticated, so whoever reaches an export acts as its principal")
	}
	for _, s := range f.exports {
		ex, err := nfs.ParseExport(strings.TrimSpace(s))
		if err != nil {
			return cfg, cli.Usagef("--export: %v", err)
		}
		if err := auth.ValidName(ex.Principal); err != nil {
			return cfg, cli.Usagef("--export %s: the principal %q: %v", s, ex.Principal, err)
		}
		cfg.Exports = append(cfg.Exports, ex)
	}
	for _, s := range f.allow {
		p, err := nfs.ParseAllow(strings.TrimSpace(s))
		if err != nil {
			return cfg, cli.Usagef("%v", err)
		}
		cfg.Allow = append(cfg.Allow, p)
	}
	return cfg, nil
}

// startNFS starts a gateway serving NFSv3 on --listen.
func (f *gatewayFlags) startNFS(cfg gateway.Config) (*gateway.Gateway, net.Listener, string, error) {
	ncfg, err := f.nfsConfig()
	if err != nil {
		return nil, nil, "", err
	}
	ncfg.Log = cfg.Log
	gw, err := gateway.New(cfg)
	if err != nil {
		return nil, nil, "", err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		gw.Close()
		return nil, nil, "", err
	}
	srv, err := gw.StartNFS(ln, ncfg)
	if err == nil {
		err = srv.Check(context.Background())
	}
	if err != nil {
		ln.Close()
		gw.Close()
		return nil, nil, "", err
	}
	var lines []string
	for _, ex := range srv.Exports() {
		lines = append(lines, fmt.Sprintf("%s as %s", ex.Path, ex.Principal))
	}
	var nets []string
	for _, p := range ncfg.Allow {
		nets = append(nets, p.String())
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return gw, ln, fmt.Sprintf("nfs://%s/ (NFSv3 and MOUNT on port %s; exports %s; clients of %s)", ln.Addr(), port,
		strings.Join(lines, ", "), strings.Join(nets, ", ")), nil
}

// loopbackNets are the networks pando up's NFS gateway serves by default.
var loopbackNets = []string{netip.MustParsePrefix("127.0.0.0/8").String(), netip.MustParsePrefix("::1/128").String()}
