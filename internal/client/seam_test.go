package client_test

import (
	"testing"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/remote/remotetest"
	"pando.dev/pando/internal/testenv"
)

// TestContract runs the contract suite of remote.Namespace and
// remote.Data on a client of a real domain, with an invalidation session
// and another that makes the changes it must hear of.
func TestContract(t *testing.T) {
	remotetest.Run(t, func(t *testing.T) remotetest.Impl {
		d := testenv.New(t, "uva")
		d.AddShare("alpha")
		c, err := client.New(d.Admin, client.Options{Session: "suite"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		other, err := client.New(d.Admin, client.Options{Session: "other"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Close() })
		return remotetest.Impl{NS: c, Data: client.Data(c), Other: client.Data(other), Dir: "/uva/alpha"}
	})
}
