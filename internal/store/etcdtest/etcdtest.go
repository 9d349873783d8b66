// Package etcdtest runs a real etcd cluster (see etcdrun) for a test, in
// its temporary directory, stopped when the test ends.
package etcdtest

import (
	"testing"

	"pando.dev/pando/internal/store/etcdrun"
)

// Cluster is a running cluster whose failures fail the test.
type Cluster struct {
	*etcdrun.Cluster
	t *testing.T
}

// Start starts an n-member cluster and waits until it has a leader.
func Start(t *testing.T, n int) *Cluster {
	t.Helper()
	c, err := etcdrun.Start(t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &Cluster{Cluster: c, t: t}
}

// Restart starts member i again on its data.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if err := c.Cluster.Restart(i); err != nil {
		c.t.Fatal(err)
	}
}
