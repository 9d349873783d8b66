// Package transfer copies files and trees between endpoints (pando cp):
// the local file system, pando paths (through a client.Client, to the
// shares themselves), and http(s) URLs as sources. A copy moves blocks
// over parallel streams with a rate cap, checks each block's CRC32C, may
// verify what it wrote, and journals every block the destination made
// durable, so that a resumed copy moves only what is missing. Between two
// pando paths the client asks the source share to push to the destination
// share itself (a third-party copy), and moves no data; the two may lie
// in two linked domains, each reached through its domain's client
// (Options.GridAt).
//
// It ranks above client and cache, beside share and controller: the
// client knows nothing of transfers (docs/layers.md).
package transfer
