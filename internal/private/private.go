// Package private makes a vfs of its own for one person an edge serves
// besides others: its own client (namespace and data path) and cache,
// wired under the vfs as the agent wires its own.
package private

import (
	"log/slog"

	"pando.dev/pando/internal/cache"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/vfs"
)

// Private is a vfs with a client and a cache of its own, for one person
// an edge serves besides others: a gateway's user, or a local user
// logged in on a mount (pando login). Nothing one fetched is served to
// another without their own rights being checked.
type Private struct {
	*vfs.FS
	cl  *client.Client
	ch  *cache.Cache
	log *slog.Logger
	// retried is closed when the retry of unsent data has stopped.
	retried chan struct{}
}

// Open opens a client with cfg and copts, a cache with cacheOpts
// (its own directory) and a vfs over them with vopts, and retries the
// data the cache holds unsent, as a mount's does.
func Open(cfg *config.Config, copts client.Options, cacheOpts cache.Options, vopts vfs.Options, log *slog.Logger) (*Private, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cacheOpts.Log = log
	if vopts.Log == nil {
		vopts.Log = log
	}
	cl, err := client.New(cfg, copts)
	if err != nil {
		return nil, err
	}
	ch, err := cache.Open(cacheOpts)
	if err != nil {
		cl.Close()
		return nil, err
	}
	p := &Private{FS: vfs.New(cl, client.Data(cl), ch, vopts), cl: cl, ch: ch, log: log, retried: make(chan struct{})}
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

// Cache is the private cache.
func (p *Private) Cache() *cache.Cache { return p.ch }

// Close sends what write delegations keep back and closes the vfs, its
// cache and its client.
func (p *Private) Close() {
	if err := p.FS.FlushDelegs(); err != nil {
		p.log.Warn("data kept back under write delegations could not all be sent; it stays in the cache", "err", err)
	}
	p.FS.Close()
	<-p.retried
	p.ch.Close()
	p.cl.Close()
}
