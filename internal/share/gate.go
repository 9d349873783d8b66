package share

import (
	"fmt"
	"sync"
	"time"

	"pando.dev/pando/internal/rpc"
)

// commitGate keeps each reader through the share to one version of a
// file: a commit waits (up to readerWait) for the read-only handles other
// clients hold on the file to be closed, new opens of it waiting for the
// commit meanwhile; reads wait while it copies. A reader that keeps its
// handle longer than that may see the file change under it, as a program
// at the share may.
type commitGate struct {
	mu    sync.Mutex
	cond  *sync.Cond
	files map[string]*gateState
}

type gateState struct {
	readers    map[string]int // holder -> read-only handles open
	committing bool           // a commit is under way: opens wait
	copying    bool           // it copies: reads wait
}

// readerWait bounds how long a commit waits for readers to close.
var readerWait = 5 * time.Second

func (c *commitGate) state(rel string) *gateState {
	if c.cond == nil {
		c.cond = sync.NewCond(&c.mu)
		c.files = make(map[string]*gateState)
	}
	g := c.files[rel]
	if g == nil {
		g = &gateState{readers: make(map[string]int)}
		c.files[rel] = g
	}
	return g
}

func (c *commitGate) tidy(rel string, g *gateState) {
	if !g.committing && len(g.readers) == 0 {
		delete(c.files, rel)
	}
}

// open waits for a commit to rel and registers a read-only handle of
// holder on it; done unregisters it.
func (c *commitGate) open(rel, holder string) (done func()) {
	c.mu.Lock()
	g := c.state(rel)
	for g.committing {
		c.cond.Wait()
	}
	g.readers[holder]++
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if g.readers[holder]--; g.readers[holder] <= 0 {
			delete(g.readers, holder)
		}
		c.tidy(rel, g)
		c.mu.Unlock()
		c.cond.Broadcast()
	}
}

// read waits for a commit's copy into rel to end before a read of it.
func (c *commitGate) read(rel string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.state(rel)
	for g.copying {
		c.cond.Wait()
	}
	c.tidy(rel, g)
}

// commit waits for another commit to rel, then for the readers other than
// holder to close (up to readerWait), and holds rel (opens and reads
// wait) until done.
func (c *commitGate) commit(rel, holder string) (done func()) {
	c.mu.Lock()
	g := c.state(rel)
	for g.committing {
		c.cond.Wait()
	}
	g.committing = true
	timeout := time.AfterFunc(readerWait, func() {
		c.mu.Lock() // wake the waiter below once its time is up
		c.mu.Unlock()
		c.cond.Broadcast()
	})
	t0 := time.Now()
	for others(g, holder) && time.Since(t0) < readerWait {
		c.cond.Wait()
	}
	timeout.Stop()
	g.copying = true
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		g.committing, g.copying = false, false
		c.tidy(rel, g)
		c.mu.Unlock()
		c.cond.Broadcast()
	}
}

func others(g *gateState, holder string) bool {
	for h := range g.readers {
		if h != holder {
			return true
		}
	}
	return false
}

// holderOf names the client a request comes from, for the gate: its
// agent's session, else its connection.
func holderOf(req *rpc.Request) string {
	if id := invSessionOf(req); id != "" {
		return id
	}
	return fmt.Sprintf("conn-%p", req.Conn)
}
