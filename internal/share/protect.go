package share

import (
	"crypto/hmac"
	"crypto/rand"
	"slices"
	"time"

	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Data channel protection, as GridFTP offers it: private (TLS, the
// default), safe (authenticated and integrity-checked, not encrypted) and
// clear (authenticated set-up only), allowed per share by policy. A client
// on a TLS control channel asks for a ticket; the data channel it then
// opens without TLS proves, with a key both ends derive from that TLS
// session, that it is the same peer.

type ticket struct {
	peer    *session
	key     []byte
	channel byte
	expires time.Time
}

const (
	ticketTTL  = 30 * time.Second
	maxTickets = 4096
)

// Protections are the names of the data channel protections.
var Protections = []string{"private", "safe", "clear"}

func (s *Server) allowed(p string) bool {
	if len(s.cfg.Protection) == 0 {
		return p == "private" || p == "safe"
	}
	return slices.Contains(s.cfg.Protection, p)
}

func (s *Server) issueTicket(req *rpc.Request) (rpc.Reply, error) {
	var r wire.TicketReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	var ch byte
	switch r.Protection {
	case "safe":
		ch = wire.ChannelDataSafe
	case "clear":
		ch = wire.ChannelDataClear
	default:
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "data channel protection %q: ask for safe or clear (private is TLS, no ticket needed)", r.Protection)
	}
	if !s.allowed(r.Protection) {
		return rpc.Reply{}, wire.Errorf(wire.CodeAccess, "share %s does not allow %s data channels; use private (the default) or ask its operator (pando share --protection)", s.cfg.Name, r.Protection)
	}
	st := req.Conn.TLSState()
	if !st.HandshakeComplete {
		return rpc.Reply{}, wire.Errorf(wire.CodeAccess, "tickets are issued on TLS channels only")
	}
	id := make([]byte, rpc.TicketSize)
	_, _ = rand.Read(id)
	key, err := rpc.ChannelKey(&st, id)
	if err != nil {
		return rpc.Reply{}, err
	}
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tickets == nil {
		s.tickets = make(map[string]*ticket)
	}
	for k, t := range s.tickets {
		if now.After(t.expires) {
			delete(s.tickets, k)
		}
	}
	if len(s.tickets) >= maxTickets {
		return rpc.Reply{}, wire.Errorf(wire.CodeUnavailable, "too many data channels are being opened; try again")
	}
	s.tickets[string(id)] = &ticket{peer: req.Conn.State.(*session), key: key, channel: ch, expires: now.Add(ticketTTL)}
	return rpc.Reply{Msg: wire.TicketResp{Ticket: id}}, nil
}

// openPlain admits a data channel without TLS by its ticket: used once,
// before it expires, for the protection it was issued for, by the holder
// of the key.
func (s *Server) openPlain(c *rpc.ServerConn) error {
	s.mu.Lock()
	t := s.tickets[string(c.Ticket)]
	delete(s.tickets, string(c.Ticket))
	s.mu.Unlock()
	if t == nil || s.cfg.Now().After(t.expires) || t.channel != c.Channel || !hmac.Equal(c.Proof, rpc.Proof(t.key, c.Ticket)) {
		return wire.Errorf(wire.CodeAccess, "data channel refused: unknown, used, expired or forged ticket")
	}
	if s.serialRevoked(t.peer.serial) {
		return s.revokedError(t.peer.peer)
	}
	c.State = &session{peer: t.peer.peer, serial: t.peer.serial}
	if c.Channel == wire.ChannelDataSafe {
		return c.Protect(t.key)
	}
	return nil
}
