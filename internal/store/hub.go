package store

import (
	"context"
	"strings"
	"sync"
)

// hub delivers an in-process engine's changes to its watchers (bbolt's
// equivalent of an etcd watch: every writer is in this process).
type hub struct {
	mu   sync.Mutex
	subs map[*sub]struct{}
}

type sub struct {
	prefix string
	ch     chan Event
}

// watchBuffer is how many changes a watcher may fall behind before its
// channel is closed (it then reads again; see Store.Watch).
const watchBuffer = 1024

func (h *hub) watch(ctx context.Context, prefix string) <-chan Event {
	s := &sub{prefix: prefix, ch: make(chan Event, watchBuffer)}
	h.mu.Lock()
	if h.subs == nil {
		h.subs = make(map[*sub]struct{})
	}
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	context.AfterFunc(ctx, func() { h.drop(s) })
	return s.ch
}

func (h *hub) drop(s *sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		close(s.ch)
	}
}

// publish sends committed changes to the watchers of their keys.
func (h *hub) publish(evs ...Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		for _, e := range evs {
			if !strings.HasPrefix(e.Key, s.prefix) {
				continue
			}
			select {
			case s.ch <- e:
			default:
				delete(h.subs, s)
				close(s.ch)
			}
			if _, ok := h.subs[s]; !ok {
				break
			}
		}
	}
}

// closeAll ends every watch (the store is closing).
func (h *hub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		delete(h.subs, s)
		close(s.ch)
	}
}
