// Package wire defines pando's protocol: the connection preface, the frame
// format and the messages carried in frames. It has no behaviour beyond
// encoding and decoding; connections, retries and dispatch live in package rpc.
//
// Every connection (control or data channel, to a controller or a share)
// starts with a preface carrying the protocol version and the channel kind,
// then carries frames. A frame is a fixed 24-byte header, a CBOR-encoded
// message (the "meta" part) and an optional raw payload (the "data" part,
// file bytes, protected by a CRC32C in the header). Decoders bound every
// length before allocating, so a malformed or hostile frame costs at most
// MaxMeta+MaxData bytes and yields ErrMalformed, never a panic.
//
// The format is specified in docs/protocol.md; change both together and bump
// Version when an old peer could misread a new frame.
package wire
