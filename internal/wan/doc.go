// Package wan is a user-space WAN emulator: a TCP proxy that makes a
// loopback connection behave like a wide-area link with a given round-trip
// time, rate and (approximate) loss. It lets pando be tried and benchmarked
// "over a WAN" on one machine without netem or root. `pando wan` runs it.
//
// # Model
//
// Each accepted connection is relayed to the target through two independent
// links, one per direction. A link is a reader goroutine, a queue of
// (deliverAt, bytes) chunks and a writer goroutine:
//
//   - Delay. A chunk read from the sending socket at time t is due at
//     max(t + RTT/2, end of the previous chunk) + serialisation, where
//     serialisation is len×8/Rate. This is a link with propagation delay
//     RTT/2 and capacity Rate: an idle link adds exactly RTT/2 per
//     direction (so a ping-pong sees RTT), and a busy link delivers at
//     exactly Rate. The writer sleeps on a timer until the head chunk is
//     due and then writes every due chunk in one writev; because deadlines
//     are absolute, late timer wake-ups do not lower the rate, they only
//     batch. Reads are small (about 2 ms of serialisation, 4-64 KiB), so the
//     output is smooth at millisecond granularity.
//   - Rate. Rate is per direction and per connection: two connections
//     through one proxy each get the full Rate (like two flows with their
//     own bottleneck, not one shared pipe).
//   - Buffering. Each link holds at most Config.Buffer bytes (counting bytes
//     being written). When it is full the reader stops reading its socket,
//     so the kernel's receive window closes and TCP back-pressure reaches
//     the sender, as behind a real bottleneck. The default is a
//     bandwidth-delay product (Rate×RTT) plus a margin of 25 ms at the rate
//     (at least 4 chunks); with an unlimited rate it is 4 MiB, which caps a
//     single connection at 4 MiB per RTT/2. A sender that keeps the link
//     full therefore also sees queueing delay of up to Buffer/Rate, like a
//     router with a BDP-sized buffer. Sockets add their own kernel buffers
//     on top of this bound.
//   - Loss. TCP does not lose bytes, it delays them; so loss is emulated as
//     delay. With probability Loss per chunk, the chunk is delivered one RTT
//     late (as if retransmitted after a fast-retransmit round trip), and
//     since order is kept everything behind it waits too. The link keeps
//     serialising the following chunks meanwhile (as TCP with SACK keeps
//     sending), so a loss costs delivery latency but not link capacity.
//     This is an approximation: loss is per chunk rather than per packet,
//     there are no timeouts, and the sender's congestion window does not
//     shrink, so throughput under loss is higher than real TCP would get.
//
// # Guarantees
//
//   - Bytes arrive complete and in order, or the connection is closed.
//   - Data is never delivered earlier than the model says; it may be later
//     when the receiver or the machine is slow.
//   - A link never holds more than its Buffer bytes.
//   - A half-close (EOF from one side) is passed on with CloseWrite after
//     everything before it has been delivered; the connection closes when
//     both directions have finished, and both sockets are closed as soon as
//     either side fails.
//   - Proxy.Close stops the listener, closes every connection (dropping
//     what the links hold) and returns after all goroutines have ended.
package wan
