// Package layers holds the test that keeps pando's packages pointing one
// way: edges (the mount, the gateways' front ends) -> vfs -> cache and
// client -> rpc and wire, and on the server side share and controller ->
// auth, store and wire. It has no code.
package layers
