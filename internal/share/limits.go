package share

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Limits bound what one principal may hold at a share at once, so that
// one user cannot starve the others: past a limit that principal's
// requests are refused with a sentence naming the limit, and nobody
// else notices. Zero fields take the defaults.
type Limits struct {
	// Handles is the number of files a principal may have open (EMFILE).
	Handles int
	// Conns is the number of connections a principal may have open, data
	// channels included (EAGAIN).
	Conns int
	// Requests is the number of a principal's requests served at once,
	// over all its connections (EAGAIN).
	Requests int
	// PendingWrites is how many bytes of a principal's writes the share
	// may hold received and not yet written to its files (ENOBUFS).
	// Writes go to the file as they arrive; what is pending is the data
	// of write and putfile requests being served.
	PendingWrites int64
	// TotalHandles is the number of files all principals together may
	// have open (ENFILE); by default half the descriptors the process may
	// open, the rest being kept for connections and the files a request
	// opens while it is served.
	TotalHandles int
	// Stages is the number of named stages a principal may keep (EDQUOT;
	// see named.go), StageBytes the bytes written to them all together
	// (EDQUOT), and StageIdle how long one nobody has attached is kept.
	Stages     int
	StageBytes int64
	StageIdle  time.Duration
}

// Default limits.
const (
	DefaultMaxHandles       = 1024
	DefaultMaxConns         = 256
	DefaultMaxRequests      = 1024
	DefaultMaxPendingWrites = 256 << 20
	DefaultMaxStages        = 64
	DefaultMaxStageBytes    = 64 << 30
	DefaultStageIdle        = 24 * time.Hour
)

// withDefaults fills the zero fields; nofile is the descriptor limit.
func (l Limits) withDefaults(nofile int) Limits {
	if l.Handles <= 0 {
		l.Handles = DefaultMaxHandles
	}
	if l.Conns <= 0 {
		l.Conns = DefaultMaxConns
	}
	if l.Requests <= 0 {
		l.Requests = DefaultMaxRequests
	}
	if l.PendingWrites <= 0 {
		l.PendingWrites = DefaultMaxPendingWrites
	}
	if l.Stages <= 0 {
		l.Stages = DefaultMaxStages
	}
	if l.StageBytes <= 0 {
		l.StageBytes = DefaultMaxStageBytes
	}
	if l.StageIdle <= 0 {
		l.StageIdle = DefaultStageIdle
	}
	if l.TotalHandles <= 0 || l.TotalHandles > nofile/2 {
		l.TotalHandles = max(nofile/2, 1)
	}
	return l
}

// raiseNoFile raises the soft limit on open descriptors to the hard one
// and returns the limit in force.
func raiseNoFile() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 1024
	}
	if rl.Cur < rl.Max {
		want := rl
		want.Cur = want.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
			rl = want
		}
	}
	return int(min(rl.Cur, 1<<30))
}

// usage is what one principal holds at the share.
type usage struct {
	handles, conns, requests int
	pending                  int64
}

func (u *usage) idle() bool { return *u == usage{} }

// usageLocked returns the usage of principal who; s.mu is held.
func (s *Server) usageLocked(who string) *usage {
	u := s.use[who]
	if u == nil {
		u = &usage{}
		s.use[who] = u
	}
	return u
}

// dropIdleLocked forgets a principal that holds nothing any more.
func (s *Server) dropIdleLocked(who string) {
	if u := s.use[who]; u != nil && u.idle() {
		delete(s.use, who)
	}
}

// admitConn counts a new connection of its principal, or refuses it.
func (s *Server) admitConn(c *rpc.ServerConn) error {
	who := c.State.(*session).peer.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.usageLocked(who)
	if u.conns >= s.limits.Conns {
		s.dropIdleLocked(who)
		return wire.Errorf(wire.CodeAgain, "%s has %d connections open to share %s, the limit; close some (stop other clients or mounts of yours) and try again",
			who, u.conns, s.cfg.Name)
	}
	u.conns++
	return nil
}

// leaveConn uncounts a connection that admitConn counted.
func (s *Server) leaveConn(c *rpc.ServerConn) {
	ss, ok := c.State.(*session)
	if !ok {
		return
	}
	who := ss.peer.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.use[who]; u != nil && u.conns > 0 {
		u.conns--
		s.dropIdleLocked(who)
	}
}

// reserveHandle counts a file the request's principal is about to open,
// or refuses it; undo gives the reservation back if the open fails. The
// handle made of it gives it back when it closes (forgetHandleLocked).
func (s *Server) reserveHandle(req *rpc.Request) (undo func(), err error) {
	who := req.Conn.State.(*session).peer.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.usageLocked(who)
	switch {
	case u.handles >= s.limits.Handles:
		s.dropIdleLocked(who)
		return nil, wire.Errorf(wire.CodeTooManyOpen, "%s has %d files open on share %s, the limit; close some", who, u.handles, s.cfg.Name)
	case s.openHandles >= s.limits.TotalHandles:
		s.dropIdleLocked(who)
		return nil, wire.Errorf(wire.CodeTableFull, "share %s has %d files open, as many as it may; try again later", s.cfg.Name, s.openHandles)
	}
	u.handles++
	s.openHandles++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.releaseHandleLocked(who)
	}, nil
}

// forgetHandleLocked removes handle id, which h is, and gives back its
// reservation; s.mu is held.
func (s *Server) forgetHandleLocked(id uint64, h *handle) {
	delete(s.handles, id)
	s.releaseHandleLocked(h.owner)
}

func (s *Server) releaseHandleLocked(who string) {
	if u := s.use[who]; u != nil && u.handles > 0 {
		u.handles--
		s.openHandles--
		s.dropIdleLocked(who)
	}
}

// exempt lists the requests served past the limit on requests: those
// that release what a principal holds.
func exempt(op wire.Op) bool {
	return op == wire.OpClose || op == wire.OpDelegReturn
}

// serveLimited serves a request within its principal's limits on
// requests in flight and pending write bytes.
func (s *Server) serveLimited(ctx context.Context, req *rpc.Request) (rpc.Reply, error) {
	ss, ok := req.Conn.State.(*session)
	if !ok || exempt(req.Op) {
		return s.Serve(ctx, req)
	}
	who := ss.peer.String()
	var data int64
	if req.Op == wire.OpWrite || req.Op == wire.OpPutFile {
		data = int64(len(req.Data))
	}
	s.mu.Lock()
	u := s.usageLocked(who)
	switch {
	case u.requests >= s.limits.Requests:
		s.dropIdleLocked(who)
		s.mu.Unlock()
		return rpc.Reply{}, wire.Errorf(wire.CodeAgain, "%s has %d requests in progress at share %s, the limit; wait for some to finish and try again",
			who, u.requests, s.cfg.Name)
	case data > 0 && u.pending+data > s.limits.PendingWrites:
		s.dropIdleLocked(who)
		s.mu.Unlock()
		return rpc.Reply{}, wire.Errorf(wire.CodeNoBufs, "%s has %s of writes in progress at share %s, and %s more would pass the limit of %s; wait for some to finish and try again",
			who, mib(u.pending), s.cfg.Name, mib(data), mib(s.limits.PendingWrites))
	}
	u.requests++
	u.pending += data
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		u.requests--
		u.pending -= data
		s.dropIdleLocked(who)
		s.mu.Unlock()
	}()
	return s.Serve(ctx, req)
}

// Usage reports what principal who holds at the share: files open,
// connections, requests in flight and pending write bytes.
func (s *Server) Usage(who string) (handles, conns, requests int, pending int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.use[who]
	if u == nil {
		return 0, 0, 0, 0
	}
	return u.handles, u.conns, u.requests, u.pending
}

// mib writes a byte count for people.
func mib(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
