package memory

import (
	"testing"

	"pando.dev/pando/internal/remote/remotetest"
	"pando.dev/pando/internal/wire"
)

// TestContract runs the contract suite on a tree of two shares.
func TestContract(t *testing.T) {
	remotetest.Run(t, func(t *testing.T) remotetest.Impl {
		tr := New("alice@uva", wire.MountEntry{Prefix: "/uva/alpha", Share: "alpha"}, wire.MountEntry{Prefix: "/uva/beta", Share: "beta", SharePath: "sub"})
		return remotetest.Impl{NS: tr, Data: tr, Dir: "/uva/beta", Other: tr}
	})
}
