package client

import (
	"context"
	"errors"
	"pando.dev/pando/internal/remote"
	"sync/atomic"

	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Stage opens a stage for the file f (open for writing): writes through
// the returned File go to a hidden file at the share, and reach f's file
// only with Commit, all at once; until then the file is as it was. Close
// throws the stage away.
func (f *File) Stage(ctx context.Context) (*Stage, error) {
	return f.StageNamed(ctx, "")
}

// StageNamed is Stage of a named stage (wire.HandleReq.Name), if name is
// not empty: the share's stage of that name for this file, made if it has
// none, which Detach leaves at the share (as does a lost connection) for a
// later StageNamed to find again, with the ranges it holds (Stage.Held).
// Close throws it away.
func (f *File) StageNamed(ctx context.Context, name string) (*Stage, error) {
	var resp wire.OpenResp
	_, _, err := f.c.call(ctx, f.loc, wire.OpStage, func(tok uint32) any {
		return wire.HandleReq{Tok: tok, Handle: f.handle, Name: name}
	}, nil, &resp, nil, f.conn, false)
	if err != nil {
		return nil, named(err, f.loc)
	}
	sf := &File{c: f.c, loc: f.loc, conn: f.conn, handle: resp.Handle, flags: wire.OpenRead | wire.OpenWrite, attr: resp.Attr, Chunk: f.Chunk, Window: f.Window}
	return &Stage{File: sf, of: f, Held: resp.Ranges}, nil
}

// Stage is a stage opened by File.Stage: write to it as to a File, then
// Commit or Close.
type Stage struct {
	*File
	of *File
	// Held is what a named stage held when attached: sorted, disjoint.
	Held []wire.ByteRange
	done atomic.Bool // committed or detached: the share released the handle
}

// Detach releases the handle of a named stage, which the share keeps.
func (s *Stage) Detach(ctx context.Context) error {
	s.c.count(wire.OpClose)
	_, err := s.c.share(s.loc.Share).callOn(ctx, s.conn, wire.OpClose, wire.HandleReq{Handle: s.handle, Keep: true}, nil, nil, nil)
	if err != nil && !errors.Is(err, rpc.ErrBroken) {
		return named(err, s.loc)
	}
	s.done.Store(true)
	return nil
}

// Commit says how a commit ends (see wire.CommitReq): the file's size
// becomes Size (or, with KeepLonger, stays larger if it is) and its
// modification time Mtime (unix ns, if not 0); with Sync, every step is
// durable at the share.
type Commit = remote.Commit

// Commit applies the stage to its file and returns the file's attributes
// afterwards. It fails with the file unchanged when the share lacks room
// for the data (wire.CodeNoSpace).
func (s *Stage) Commit(ctx context.Context, c Commit) (wire.Attr, error) {
	var resp wire.AttrResp
	_, _, err := s.c.call(ctx, s.loc, wire.OpCommit, func(tok uint32) any {
		return wire.CommitReq{Tok: tok, Handle: s.handle, Size: c.Size, Mtime: c.Mtime, KeepLonger: c.KeepLonger, Sync: c.Sync}
	}, nil, &resp, nil, s.conn, false)
	if err != nil {
		return wire.Attr{}, named(err, s.loc)
	}
	s.done.Store(true)
	s.of.setAttr(resp.Attr)
	return resp.Attr, nil
}

// Close throws the stage away, unless it was committed.
func (s *Stage) Close(ctx context.Context) error {
	if s.done.Load() {
		return nil
	}
	return s.File.Close(ctx)
}

// CommitInline replaces the data of the file f (open for writing) in one
// round trip: data holds the new bytes of ranges, one after the other (at
// most wire.MaxData in all), which the share stages and commits as
// Stage.Commit does.
func (f *File) CommitInline(ctx context.Context, ranges []wire.ByteRange, data []byte, c Commit) (wire.Attr, error) {
	sum := wire.CRC(data)
	var resp wire.AttrResp
	_, _, err := f.c.call(ctx, f.loc, wire.OpCommit, func(tok uint32) any {
		return wire.CommitReq{Tok: tok, Handle: f.handle, Size: c.Size, Mtime: c.Mtime, Inline: true, Ranges: ranges, Sum: &sum,
			KeepLonger: c.KeepLonger, Sync: c.Sync}
	}, data, &resp, nil, nil, true)
	if err != nil {
		return wire.Attr{}, named(err, f.loc)
	}
	f.setAttr(resp.Attr)
	return resp.Attr, nil
}
