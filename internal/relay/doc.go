// Package relay serves a server that cannot accept connections (behind a
// firewall or NAT: a share, a controller) through a relay it dials out
// to, as Avaki's proxy server did between grid domains.
//
// The server keeps a control connection to the relay, mutual TLS 1.3
// with its pando certificate; the relay checks the certificate against
// the CAs it was given and registers the server under the identity the
// certificate names, and no other. A client dials the relay and asks for
// a registered name (Dial, for an address relay://HOST:PORT/NAME); the
// relay tells the server, over its control connection, to dial a fresh
// connection back with a one-time nonce, and splices the two. Client and
// server then run pando's own end-to-end mutual TLS through the splice:
// the relay forwards bytes it cannot read or forge, and can only drop or
// delay them.
//
// A relay bounds each peer (Limits: connections per server and per client
// address, a deadline on every request, idle splices ended, request lines
// of at most MaxLine bytes), refuses with one sentence ("ERR ...") and
// keeps serving everyone else, and counts connections, refusals and
// bytes each way per server (Server.Stats, and a Prometheus collector).
// The protocol is in docs/protocol.md, "Relay".
package relay
