// Package layers holds the test that keeps pando's packages pointing one
// way. Ranks, from the top: cmd/pando; bench and doctor; cli and testenv;
// agent and gateway; the edges (mount, web, nfs), which may import only
// vfs and wire; vfs; transfer, share, controller and consistency; client
// and cache; config and rpc; wire, auth, store and blockcache. A package
// imports only packages of a lower rank, and utilities (metricsrv, wan...),
// which import none. transfer ranks above client: it copies through one.
// The vfs also may not depend on cache by any path: it holds the block
// cache as a blockcache.Cache (TestHeldThrough). types_test.go type-checks
// the edges and fails when one calls a method, reads a field or uses a vfs
// name whose type comes from below the vfs.
// docs/layers.md gives each rank; layers_test.go holds them. It has no
// code.
package layers
