package cli

import (
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/federation"
)

// Grid is what a command reaches grid paths of every domain through: the
// home client, and the router that makes a client of a linked domain when
// a path names one (ClientFor) and answers for the root, which lists the
// home domain and every linked one.
type Grid struct {
	*federation.Router
	Home *client.Client
}

// Grid loads the configuration and makes the home client (with opts) and
// a router over it.
func (g *Globals) Grid(opts client.Options) (*Grid, error) {
	cfg, err := g.Config()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	return &Grid{Router: federation.ForClient(c, opts), Home: c}, nil
}

// Close closes the linked domains' clients and the home one.
func (gr *Grid) Close() {
	gr.Router.Close()
	gr.Home.Close()
}
