package share

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Third-party transfer: a client steers, this share reads its file and
// writes it to another share with a token the client had delegated to it.
// The destination checks every block against the CRC32C this share
// computed when it read the block.

// peers pools delegated clients by token, so that the pushes of one
// transfer share connections; idle ones are closed.
type peers struct {
	mu sync.Mutex
	m  map[string]*peer
}

type peer struct {
	c    *client.Client
	used time.Time
	busy int
}

const peerIdle = time.Minute

func (s *Server) peer(t wire.ResolveResp, domain string, streams int, protection string) (*peer, error) {
	if s.cfg.Identity == nil {
		return nil, wire.Errorf(wire.CodeNotSupp, "share %s has no identity of its own to reach other shares with", s.cfg.Name)
	}
	id := s.cfg.Identity
	if domain != "" && domain != s.cfg.Domain {
		var ca []byte
		if s.cfg.Trust != nil {
			ca = s.cfg.Trust.CAPEM(domain)
		}
		if ca == nil {
			return nil, wire.Errorf(wire.CodeAccess, "share %s@%s cannot push to domain %s, which its domain has not linked", s.cfg.Name, s.cfg.Domain, domain)
		}
		other := *id
		other.Domain, other.Controller, other.Controllers, other.CA = domain, "", nil, string(ca)
		id = &other
	}
	key := protection + "\x00" + domain + "\x00" + string(t.Token)
	p := &s.peers
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = make(map[string]*peer)
	}
	now := time.Now()
	for k, q := range p.m {
		if q.busy == 0 && now.Sub(q.used) > peerIdle {
			q.c.Close()
			delete(p.m, k)
		}
	}
	if q := p.m[key]; q != nil {
		q.busy++
		return q, nil
	}
	c, err := client.NewDelegated(id, t, client.Options{Streams: max(1, min(streams, 16)), Protection: protection})
	if err != nil {
		return nil, err
	}
	q := &peer{c: c, busy: 1}
	p.m[key] = q
	return q, nil
}

func (s *Server) release(q *peer) {
	s.peers.mu.Lock()
	q.busy--
	q.used = time.Now()
	s.peers.mu.Unlock()
}

func (s *Server) closePeers() {
	s.peers.mu.Lock()
	defer s.peers.mu.Unlock()
	for k, q := range s.peers.m {
		q.c.Close()
		delete(s.peers.m, k)
	}
}

func (s *Server) push(ctx context.Context, req *rpc.Request) (rpc.Reply, error) {
	var r wire.PushReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	_, rel, err := s.reach(req, r.Tok, r.Path, true, auth.Read)
	if err != nil {
		return rpc.Reply{}, err
	}
	if r.Block == 0 || r.Block > wire.MaxData || r.Offset < 0 || r.Length < 0 || r.Length > wire.MaxSumLength {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "push of %d bytes at %d in blocks of %d: out of bounds", r.Length, r.Offset, r.Block)
	}
	f, err := s.tree.openFile(rel, os.O_RDONLY, 0)
	if err != nil {
		return rpc.Reply{}, toWire(req.Op, rel, err)
	}
	defer f.Close()
	switch r.Protection {
	case "", "private", "safe", "clear":
	default:
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "data channel protection %q: choose private, safe or clear", r.Protection)
	}
	q, err := s.peer(r.Dest, r.DestDomain, r.Streams, r.Protection)
	if err != nil {
		return rpc.Reply{}, err
	}
	defer s.release(q)
	if r.Whole {
		a, err := fileAttr(f)
		if err != nil {
			return rpc.Reply{}, toWire(req.Op, rel, err)
		}
		if a.Size > int64(r.Block) {
			return rpc.Reply{}, wire.Errorf(wire.CodeFileTooBig, "/%s: %d bytes do not fit in one block of %d; push it in ranges", rel, a.Size, r.Block)
		}
		buf := make([]byte, a.Size)
		n, err := f.ReadAt(buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return rpc.Reply{}, toWire(req.Op, rel, err)
		}
		sum := wire.CRC(buf[:n])
		if _, err := q.c.PutFile(ctx, r.DestPath, buf[:n], r.Mode, r.Mtime, sum); err != nil {
			return rpc.Reply{}, err
		}
		return rpc.Reply{Msg: wire.PushResp{Sums: []uint32{sum}}}, nil
	}
	dst, err := q.c.Open(ctx, r.DestPath, wire.OpenWrite)
	if err != nil {
		return rpc.Reply{}, err
	}
	defer dst.Close(context.WithoutCancel(ctx))
	nblocks := int((r.Length + int64(r.Block) - 1) / int64(r.Block))
	sums := make([]uint32, nblocks)
	g, failed := errgroup.WithContext(ctx)
	g.SetLimit(max(1, min(r.Window, 64)))
	for i := range nblocks {
		if failed.Err() != nil {
			break
		}
		g.Go(func() error {
			if failed.Err() != nil {
				return nil
			}
			off := r.Offset + int64(i)*int64(r.Block)
			buf, release := rpc.DataBuf(int(min(int64(r.Block), r.Offset+r.Length-off)))
			defer release() // WriteBlock returns once the frame is written and answered
			n, sum, err := readSummed(f, buf, off)
			switch {
			case err == nil || errors.Is(err, io.EOF) && n == len(buf):
				sums[i] = sum
				return dst.WriteBlock(ctx, buf, off, sum)
			case errors.Is(err, io.EOF):
				return wire.Errorf(wire.CodeInvalid, "/%s shrank while being pushed (%d bytes at %d)", rel, n, off)
			}
			return toWire(req.Op, rel, err)
		})
	}
	if err := g.Wait(); err != nil {
		return rpc.Reply{}, err
	}
	if r.Sync {
		if err := dst.Sync(ctx); err != nil {
			return rpc.Reply{}, err
		}
	}
	return rpc.Reply{Msg: wire.PushResp{Sums: sums}}, nil
}
