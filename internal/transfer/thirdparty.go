package transfer

import (
	"context"
	"sync"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/wire"
)

// Third-party copies: between two pando paths, the client asks the source
// share to push to the destination share with a token delegated to it
// (the user's rights, usable by that share only). The client creates the
// partial file, steers ranges, journals what the destination synced, and
// moves no data itself. The two paths may lie in two linked domains, each
// reached through its domain's client: the destination's controller then
// delegates its token to the source share named share@domain, and the
// source share checks the destination share against the destination
// domain's CA.

// pushRange is the number of blocks one push request moves.
const pushRange = 16

type thirdParty struct {
	c  *client.Client // the source's: it asks the source share to push
	dc *client.Client // the destination's: it delegates the token (c, or a linked domain's)
	mu sync.Mutex
	// tokens delegated to a source share for a destination mount, by
	// "share\x00prefix".
	tokens map[string]wire.ResolveResp
}

// dest returns a token for dp's mount that the share holding sp may use.
func (t *thirdParty) dest(ctx context.Context, sp, dp string) (wire.ResolveResp, error) {
	src, err := t.c.Locate(ctx, sp)
	if err != nil {
		return wire.ResolveResp{}, err
	}
	dst, err := t.dc.Locate(ctx, dp)
	if err != nil {
		return wire.ResolveResp{}, err
	}
	proxy := src.Share
	if t.dc != t.c {
		proxy += "@" + t.c.Domain()
	}
	key := proxy + "\x00" + dst.Prefix
	t.mu.Lock()
	r, ok := t.tokens[key]
	t.mu.Unlock()
	// Renew well before expiry: a push may take a while.
	if ok && time.Until(time.Unix(0, r.Expires)) > time.Minute {
		return r, nil
	}
	r, err = t.dc.ResolveFor(ctx, dp, proxy)
	if err != nil {
		return wire.ResolveResp{}, err
	}
	t.mu.Lock()
	t.tokens[key] = r
	t.mu.Unlock()
	return r, nil
}

// destDomain is the destination's domain when it is not the source's.
func (t *thirdParty) destDomain() string {
	if t.dc == t.c {
		return ""
	}
	return t.dc.Domain()
}

func (x *run) pushSmall(ctx context.Context, j job) error {
	d, err := x.third.dest(ctx, j.sp, j.dp)
	if err != nil {
		return err
	}
	if _, err := x.third.c.Push(ctx, j.sp, wire.PushReq{Block: uint32(x.o.Block), Dest: d, DestPath: j.dp,
		Whole: true, Mode: j.in.Mode & 0o777, Mtime: j.in.Mtime, Protection: x.third.c.Protection(), DestDomain: x.third.destDomain()}); err != nil {
		return err
	}
	x.moved.Add(j.in.Size)
	return nil
}

// pushPump is pump for third-party copies: ranges of missing blocks, each
// pushed, synced at the destination and journaled.
func (x *run) pushPump(ctx context.Context, j job, jr *journal, part string) error {
	w, err := x.dst.OpenWrite(ctx, part, j.in.Mode|0o600)
	if err != nil {
		return err
	}
	err = w.Truncate(ctx, j.in.Size)
	if err == nil && jr.Unsynced && !x.o.NoSync {
		// A durable copy resuming one that was not: make what is there
		// durable before more is journaled as synced.
		if err = w.Sync(ctx); err == nil {
			jr.Unsynced = false
			err = jr.save()
		}
	}
	w.Close()
	if err != nil {
		return err
	}
	type rng struct{ first, n int }
	var todo []rng
	for i := 0; i < len(jr.Sums); i++ {
		if jr.done(i) {
			continue
		}
		if k := len(todo) - 1; k >= 0 && todo[k].first+todo[k].n == i && todo[k].n < pushRange {
			todo[k].n++
		} else {
			todo = append(todo, rng{i, 1})
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		next int
	)
	for range x.o.Streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				if next >= len(todo) {
					mu.Unlock()
					return
				}
				r := todo[next]
				next++
				mu.Unlock()
				off := int64(r.first) * int64(jr.Block)
				length := min(int64(r.n)*int64(jr.Block), j.in.Size-off)
				x.limit(ctx, int(length))
				d, err := x.third.dest(ctx, j.sp, part)
				if err != nil {
					cancel(err)
					return
				}
				sums, err := x.third.c.Push(ctx, j.sp, wire.PushReq{Offset: off, Length: length, Block: uint32(jr.Block),
					Dest: d, DestPath: part, Streams: x.o.Streams, Window: 4, Sync: !x.o.NoSync, Protection: x.third.c.Protection(),
					DestDomain: x.third.destDomain()})
				if err == nil && len(sums) != r.n {
					err = wire.Errorf(wire.CodeIO, "the source share pushed %d blocks of %d", len(sums), r.n)
				}
				if err != nil {
					cancel(err)
					return
				}
				x.moved.Add(length)
				mu.Lock()
				for k, s := range sums {
					jr.mark(r.first+k, s)
				}
				jr.Unsynced = jr.Unsynced || x.o.NoSync
				err = jr.save()
				mu.Unlock()
				if err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}
