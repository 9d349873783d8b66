package gateway

import (
	"net"
	"path/filepath"

	"pando.dev/pando/internal/nfs"
)

// StartNFS serves the exports of cfg over NFSv3 on ln until ln is closed,
// each export with the rights of its principal (the gateway acting for
// it, as for a signed-in user of its other front ends).
func (g *Gateway) StartNFS(ln net.Listener, cfg nfs.Config) (*nfs.Server, error) {
	if cfg.Log == nil {
		cfg.Log = g.cfg.Log
	}
	if cfg.HandleFile == "" {
		cfg.HandleFile = filepath.Join(g.cfg.Cache.Dir, "nfs-handles")
	}
	srv, err := nfs.New(g, cfg, &g.NFS)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.nfs = append(g.nfs, srv)
	g.mu.Unlock()
	go srv.Serve(ln)
	return srv, nil
}
