// Package private makes a vfs of its own for one person an edge serves
// besides others: its own client (and the linked domains' clients, under
// a federation.Router, the vfs's namespace and data path) and cache,
// wired under the vfs as the agent wires its own.
package private

import (
	"log/slog"

	"pando.dev/pando/internal/blockcache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/federation"
	"pando.dev/pando/internal/vfs"
)

// Private is a vfs with a client and a block cache of its own, for one person
// an edge serves besides others: a gateway's user, or a local user
// logged in on a mount (pando login). Nothing one fetched is served to
// another without their own rights being checked.
type Private struct {
	*vfs.FS
	cl  *client.Client
	rt  *federation.Router
	ch  blockcache.Cache
	log *slog.Logger
	// retried is closed when the retry of unsent data has stopped.
	retried chan struct{}
}

// Open opens a client with cfg and copts and a vfs over it and ch with
// vopts, and retries the data the cache holds unsent, as a mount's does.
// ch is the person's own block cache (its own directory), opened by the
// caller and the Private's from then on: Close closes it, and so does
// Open when it fails.
func Open(cfg *config.Config, copts client.Options, ch blockcache.Cache, vopts vfs.Options, log *slog.Logger) (*Private, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if vopts.Log == nil {
		vopts.Log = log
	}
	cl, err := client.New(cfg, copts)
	if err != nil {
		ch.Close()
		return nil, err
	}
	rt := federation.ForClient(cl, copts)
	p := &Private{FS: vfs.New(rt, rt, ch, vopts), cl: cl, rt: rt, ch: ch, log: log, retried: make(chan struct{})}
	// Data a write could not send (its share away) is sent when it can
	// be, or kept beside a file changed meanwhile.
	go func() {
		defer close(p.retried)
		p.FS.RetryUnsent(log)
	}()
	return p, nil
}

// Client is the private client: for what a runner asks the domain in
// the person's name besides the file system (who they are, ACLs, the
// list of shares, RPC counts).
func (p *Private) Client() *client.Client { return p.cl }

// Router is the private namespace over the home client and the linked
// domains' clients: for what a runner asks of a path of any domain.
func (p *Private) Router() *federation.Router { return p.rt }

// Close sends what write delegations keep back and closes the vfs, its
// cache and its client.
func (p *Private) Close() {
	if err := p.FS.FlushDelegs(); err != nil {
		p.log.Warn("data kept back under write delegations could not all be sent; it stays in the cache", "err", err)
	}
	p.FS.Close()
	<-p.retried
	p.ch.Close()
	p.rt.Close()
	p.cl.Close()
}
