// Package rpc runs pando's protocol (package wire) over TLS connections:
// a client Conn that multiplexes concurrent calls on one connection and
// reads reply data straight into the caller's buffer, and a Server that
// dispatches requests to a Handler with bounded concurrency per connection.
// An address relay://HOST:PORT/NAME is dialled through that relay
// (package relay); the TLS then runs end to end through it.
//
// Guarantees:
//   - Every call has a deadline (the context's, or DefaultTimeout).
//   - A malformed frame from a peer ends that connection with a clear
//     TypeError frame; the server goes on serving every other connection.
//   - A frame begun must be whole within the server's frame bound (see
//     DefaultFrameTimeout); a connection idle between frames is kept.
//   - A connection the server ends with End fails all its calls, and
//     every later one, with the error End sent (not ErrBroken).
//   - A connection that breaks fails all its calls with ErrBroken; callers
//     decide whether to retry (only idempotent ops are, see wire.Op.Idempotent).
//   - Nothing here retries by itself.
package rpc
