package rpc

import (
	"context"
	"errors"
	"testing"
	"time"

	"pando.dev/pando/internal/wire"
)

// TestEndTellsWhy: a connection the server ends with an error fails the
// call in flight, and every later call, with that error, not with a bare
// "connection lost"; the server's other connections go on.
func TestEndTellsWhy(t *testing.T) {
	started := make(chan struct{}, 1)
	s := &Server{}
	s.Handler = HandlerFunc(func(ctx context.Context, req *Request) (Reply, error) {
		if req.Op == wire.OpLock { // a request that waits, as a lock does
			started <- struct{}{}
			<-ctx.Done()
		}
		return Reply{}, nil
	})
	addr, cli := serveTLS(t, s)
	ctx := context.Background()
	doomed, err := Dial(ctx, addr, cli, wire.ChannelControl)
	if err != nil {
		t.Fatal(err)
	}
	defer doomed.Close()
	other, err := Dial(ctx, addr, cli, wire.ChannelControl)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	// Tell the two apart on the server by their order of arrival.
	if _, err := doomed.Call(ctx, wire.OpPing, wire.Empty{}, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	inFlight := make(chan error, 1)
	go func() {
		_, err := doomed.Call(ctx, wire.OpLock, wire.Empty{}, nil, nil, nil)
		inFlight <- err
	}()
	<-started
	why := wire.Errorf(wire.CodeTokenRevoked, "the credentials of bob@uva have been revoked")
	ended := 0
	s.EachConn(func(c *ServerConn) {
		c.mu.Lock()
		waiting := len(c.running) > 0
		c.mu.Unlock()
		if waiting {
			c.End(why)
			ended++
		}
	})
	if ended != 1 {
		t.Fatalf("ended %d connections, want the one with a request waiting", ended)
	}
	check := func(what string, err error) {
		t.Helper()
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeTokenRevoked || we.Message != why.Message {
			t.Errorf("%s: got %v, want %q", what, err, why.Message)
		}
	}
	select {
	case err := <-inFlight:
		check("the call in flight", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the call in flight never ended")
	}
	<-doomed.Done()
	_, err = doomed.Call(ctx, wire.OpPing, wire.Empty{}, nil, nil, nil)
	check("a later call", err)
	if _, err := other.Call(ctx, wire.OpPing, wire.Empty{}, nil, nil, nil); err != nil {
		t.Errorf("another connection after the end of one: %v", err)
	}
}
