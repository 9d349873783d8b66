package share

import (
	"strings"
	"syscall"
	"time"

	"pando.dev/pando/internal/fault"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// The requests of an agent's session: its invalidation polls, the
// delegations it returns, and the write delegations its opens are granted.

// grantWrite grants session id a write delegation on rel if no other
// agent has the file open; then other agents' read delegations on it are
// recalled, so that they ask again (and so recall this one) before they
// use the file.
//
// The delegation is recorded before the recall: while the open waits for
// the recalled agents' acknowledgements, any request of another agent on
// rel finds it and recalls it, instead of reading the file and taking a
// read hold that nothing would recall once the holder keeps its writes
// back. Such a recall can reach the holder before the open's reply does;
// the agent applies it to the delegation that reply brings.
func (s *Server) grantWrite(req *rpc.Request, id, rel string, reclaim bool) uint64 {
	s.mu.Lock()
	for _, h := range s.handles {
		if h.rel == rel && h.session != id {
			s.mu.Unlock()
			return 0
		}
	}
	s.mu.Unlock()
	did := s.inv.grantWrite(id, rel, reclaim)
	if did == 0 {
		return 0
	}
	// A reclaim too: the share may have revoked the delegation (its
	// holder's lease ran out) and let others read the file since.
	s.changed(req, rel)
	return did
}

// sessionID checks the token of a request that names an agent session
// (what: the request, for the error) and returns the session's id.
// Sessions are per principal: one cannot drain another's buffer or
// return another's delegation.
func (s *Server) sessionID(req *rpc.Request, tok uint32, session, what string) (string, error) {
	t, err := s.token(req, tok)
	if err != nil {
		return "", err
	}
	if session == "" || len(session) > 64 {
		return "", wire.Errorf(wire.CodeInvalid, "%s needs a session name of 1 to 64 bytes", what)
	}
	return t.Principal + "/" + session, nil
}

// getInv answers an invalidation poll.
func (s *Server) getInv(req *rpc.Request) (rpc.Reply, error) {
	var r wire.GetInvReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	id, err := s.sessionID(req, r.Tok, r.Session, "an invalidation poll")
	if err != nil {
		return rpc.Reply{}, err
	}
	paths, recalls, stamp, force, again := s.inv.longPoll(id, r.Since, int(min(r.Max, 65536)),
		time.Duration(r.Wait), time.Duration(r.Lease))
	return rpc.Reply{Msg: wire.GetInvResp{Paths: paths, Recalls: recalls, Stamp: stamp, Force: force, Again: again, Epoch: s.inv.epoch}}, nil
}

// delegReturn takes back (part of) a recalled write delegation.
func (s *Server) delegReturn(req *rpc.Request) (rpc.Reply, error) {
	var r wire.DelegReturnReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	id, err := s.sessionID(req, r.Tok, r.Session, "a delegation return")
	if err != nil {
		return rpc.Reply{}, err
	}
	if r.Code != 0 {
		if len(r.Message) > wire.MaxReturnMessage {
			return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "a failed delegation return may give a reason of at most %d bytes", wire.MaxReturnMessage)
		}
		s.inv.failReturn(id, r.Path, r.ID, s.returnFailure(r.Path, r.Code, r.Message))
		return rpc.Reply{}, nil
	}
	if len(r.Pending) > 1<<16 {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "a delegation return may name at most 65536 pending ranges")
	}
	if s.inv.returnDeleg(id, r.Path, r.ID, r.Pending, r.Done) {
		// The writes of the return were not recalled one by one from
		// the readers that went ahead meanwhile: once, now.
		s.changed(req, r.Path)
	}
	if !r.Done {
		fault.Crash("share.deleg.partial-return")
	}
	return rpc.Reply{}, nil
}

// returnFailure is the error requests waiting for the write delegation on
// rel get once its holder answered the recall that it cannot write its
// data back (code, why). Only the causes a reader can act on pass (a
// full share: ENOSPC); anything else is EIO. The holder's reason is shown
// as text, control characters removed.
func (s *Server) returnFailure(rel string, code wire.Code, why string) *wire.Error {
	if code != wire.CodeNoSpace {
		code = wire.CodeIO
	}
	why = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, why)
	if why == "" {
		why = syscall.Errno(code).Error()
	}
	return &wire.Error{Code: code, Paths: []string{rel}, Message: "/" + rel +
		": the data another agent wrote to it (under a write delegation) could not be written to share " + s.cfg.Name + ": " + why +
		"; that agent keeps it and sends it once the cause is gone (for a full disk: once space is freed at the share)"}
}
