package share

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// done reports whether ch is closed within d.
func doneWithin(ch chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// recalling reports whether the delegation on path is being recalled.
func (t *invTable) recalling(path string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.wdelegs[path]
	return d != nil && d.recalling
}

func await(tab *invTable, id, path string, want wire.ByteRange, mutate bool) chan struct{} {
	ch := make(chan struct{})
	go func() { tab.awaitDeleg(id, path, want, mutate); close(ch) }()
	return ch
}

// TestWriteDelegationRecall: a conflicting request recalls the holder's
// write delegation over its long poll and waits; after the first return
// step, reads of bytes not pending go ahead, reads of pending bytes wait
// until the holder has written them, and changes wait for the last step.
func TestWriteDelegationRecall(t *testing.T) {
	tab := newInvTable(time.Now)
	lease := 2 * time.Second
	_, _, hs, _, _ := tab.longPoll("h", 0, 0, time.Millisecond, lease) // the holder's session
	tab.longPoll("r", 0, 0, time.Millisecond, lease)
	if !(tab.grantWrite("h", "f", false) != 0) {
		t.Fatal("no delegation granted")
	}
	if tab.grantWrite("r", "f", false) != 0 {
		t.Fatal("a second agent was granted a delegation on the same file")
	}
	// The holder's own requests never wait.
	if !doneWithin(await(tab, "h", "f", firstBlock, true), time.Second) {
		t.Fatal("the holder waited for its own delegation")
	}
	stat := await(tab, "r", "f", firstBlock, false)
	_, recalls, _, _, _ := tab.longPoll("h", hs, 0, time.Second, lease)
	if len(recalls) != 1 || recalls[0].Path != "f" || recalls[0].Len != 1<<20 {
		t.Fatalf("recalls sent to the holder: %+v", recalls)
	}
	if doneWithin(stat, 100*time.Millisecond) {
		t.Fatal("a conflicting request went ahead before the delegation was returned")
	}
	// First step: the first block and the size are at the share; two
	// more blocks are pending.
	pending := []wire.ByteRange{{Off: 1 << 20, Len: 1 << 20}, {Off: 3 << 20, Len: 1 << 20}}
	tab.returnDeleg("h", "f", 0, pending, false)
	if !doneWithin(stat, time.Second) {
		t.Fatal("a request needing no pending byte waited past the first return step")
	}
	readPending := await(tab, "r", "f", wire.ByteRange{Off: 3<<20 + 5, Len: 10}, false)
	change := await(tab, "r", "f", firstBlock, true)
	if doneWithin(readPending, 100*time.Millisecond) || doneWithin(change, 10*time.Millisecond) {
		t.Fatal("a read of pending bytes or a change went ahead before the bytes were written")
	}
	tab.wroteDeleg("h", "f", 3<<20, 1<<20)
	if !doneWithin(readPending, time.Second) {
		t.Fatal("a read of bytes just written still waits")
	}
	if doneWithin(change, 100*time.Millisecond) {
		t.Fatal("a change went ahead before the last return step")
	}
	tab.returnDeleg("h", "f", 0, nil, true)
	if !doneWithin(change, time.Second) {
		t.Fatal("a change still waits after the delegation was returned")
	}
	if tab.delegCount.Load() != 0 {
		t.Fatal("a returned delegation is still held")
	}
}

// TestWriteDelegationLease: a holder that stops asking loses its
// delegation when its lease ends; the waiting request then goes ahead.
func TestWriteDelegationLease(t *testing.T) {
	tab := newInvTable(time.Now)
	lease := 300 * time.Millisecond
	tab.longPoll("h", 0, 0, time.Millisecond, lease)
	tab.longPoll("r", 0, 0, time.Millisecond, lease)
	tab.grantWrite("h", "f", false)
	t0 := time.Now()
	if !doneWithin(await(tab, "r", "f", firstBlock, true), 5*time.Second) {
		t.Fatal("a request waits for a silent holder beyond its lease")
	}
	if el := time.Since(t0); el < lease {
		t.Errorf("the delegation was revoked after %v, before the lease of %v ran out", el, lease)
	}
	if _, _, _, force, _ := tab.longPoll("h", 5, 0, time.Millisecond, lease); !force {
		t.Error("a holder whose delegation was revoked is not told to drop its cache")
	}
}

// TestWriteDelegationGrace: delegations listed before a restart wait for
// their holders to reclaim them; requests on them wait until the reclaim
// (then recall) or the end of the grace period.
func TestWriteDelegationGrace(t *testing.T) {
	file := filepath.Join(t.TempDir(), "delegations")
	tab := newInvTable(time.Now)
	tab.loadDelegs(file)
	tab.longPoll("h", 0, 0, time.Millisecond, time.Second)
	tab.grantWrite("h", "f", false)
	tab.grantWrite("h", "g", false)

	// The share restarts.
	tab = newInvTable(time.Now)
	tab.loadDelegs(file)
	_, _, hs, _, _ := tab.longPoll("h", 0, 0, time.Millisecond, time.Second)
	tab.longPoll("r", 0, 0, time.Millisecond, time.Second)
	if tab.grantWrite("r", "f", false) != 0 {
		t.Fatal("another agent was granted a delegation its holder may still reclaim")
	}
	onF := await(tab, "r", "f", firstBlock, false)
	if doneWithin(onF, 100*time.Millisecond) {
		t.Fatal("a request went ahead on a delegation not yet reclaimed")
	}
	if !(tab.grantWrite("h", "f", true) != 0) {
		t.Fatal("the holder could not reclaim its delegation")
	}
	// Reclaimed: the waiting request now recalls it.
	_, recalls, _, _, _ := tab.longPoll("h", hs, 0, time.Second, time.Second)
	if len(recalls) != 1 || recalls[0].Path != "f" {
		t.Fatalf("recalls after a reclaim: %+v", recalls)
	}
	tab.returnDeleg("h", "f", 0, nil, true)
	if !doneWithin(onF, time.Second) {
		t.Fatal("the request still waits after the reclaimed delegation was returned")
	}
	// g is never reclaimed: a request waits until the grace period ends.
	t0 := time.Now()
	if !doneWithin(await(tab, "r", "g", firstBlock, true), graceDelegs+2*time.Second) {
		t.Fatal("a request on a delegation nobody reclaimed waits beyond the grace period")
	}
	if el := time.Since(t0); el < graceDelegs-time.Second {
		t.Errorf("went ahead after %v, inside the grace period", el)
	}
}

// agents drives a share as agents would, each session on a connection
// of its own.
type agents struct {
	t     *testing.T
	s     *Server
	conns map[string]*rpc.ServerConn
	lease time.Duration
}

// newAgents is a share over root, with a connection for each session.
func newAgents(t *testing.T, root string, sessions ...string) *agents {
	s, login := serverLogin(t, root, []auth.Grant{{Path: "", Rights: auth.All}})
	a := &agents{t: t, s: s, conns: make(map[string]*rpc.ServerConn), lease: 10 * time.Second}
	for _, name := range sessions {
		a.conns[name] = login(name)
	}
	return a
}

func (a *agents) serve(name string, op wire.Op, msg any, data []byte) (any, error) {
	meta, _ := wire.Marshal(msg)
	rep, err := a.s.Serve(context.Background(), &rpc.Request{Op: op, Meta: meta, Data: data, Conn: a.conns[name]})
	if rep.Release != nil {
		rep.Release()
	}
	return rep.Msg, err
}

// poll is the long poll of session name.
func (a *agents) poll(name string, since uint64, wait time.Duration) wire.GetInvResp {
	m, err := a.serve(name, wire.OpGetInv, wire.GetInvReq{Tok: 1, Session: name, Since: since, Wait: int64(wait), Lease: int64(a.lease)}, nil)
	if err != nil {
		a.t.Error(err)
		return wire.GetInvResp{}
	}
	return m.(wire.GetInvResp)
}

func (a *agents) stat(name, path string) (wire.Attr, error) {
	m, err := a.serve(name, wire.OpGetAttr, wire.PathReq{Tok: 1, Path: path}, nil)
	if err != nil {
		return wire.Attr{}, err
	}
	return m.(wire.AttrResp).Attr, nil
}

// open opens path for session name in the background.
func (a *agents) open(name, path string, flags uint32) chan wire.OpenResp {
	opened := make(chan wire.OpenResp, 1)
	go func() {
		m, err := a.serve(name, wire.OpOpen, wire.OpenReq{Tok: 1, Path: path, Flags: flags}, nil)
		if err != nil {
			a.t.Error(err)
			close(opened)
			return
		}
		opened <- m.(wire.OpenResp)
	}()
	return opened
}

// TestWriteDelegationGrantBeforeRecall: granting a write delegation
// recalls other agents' read holds on the file, and the open waits for
// their acknowledgements; a request of another agent served during that
// wait must find the delegation (and recall it), not take a read hold that
// nothing recalls once the holder keeps its writes back.
func TestWriteDelegationGrantBeforeRecall(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	ag := newAgents(t, root, "w", "r") // the writer's agent and a reader's
	ws := ag.poll("w", 0, time.Millisecond).Stamp
	rs := ag.poll("r", 0, time.Millisecond).Stamp
	if _, err := ag.stat("r", "a"); err != nil { // r holds a
		t.Fatal(err)
	}

	opened := ag.open("w", "a", wire.OpenWrite|wire.OpenDeleg)
	// The grant recalls r's hold; the open waits until r acknowledges.
	inv := ag.poll("r", rs, 5*time.Second)
	if !slices.Contains(inv.Paths, "a") {
		t.Fatalf("the grant did not recall the reader's hold: %+v", inv)
	}
	// r has dropped what it cached and looks at a again before its next
	// poll acknowledges the recall.
	type result struct {
		a   wire.Attr
		err error
	}
	looked := make(chan result, 1)
	go func() {
		a, err := ag.stat("r", "a")
		looked <- result{a, err}
	}()
	var early *result
	for early == nil && !ag.s.inv.recalling("a") {
		select {
		case res := <-looked:
			early = &res
		case <-time.After(time.Millisecond):
		}
	}
	acked := make(chan wire.GetInvResp, 1)
	go func() { acked <- ag.poll("r", inv.Stamp, 200*time.Millisecond) }()
	resp, ok := <-opened
	if !ok || !resp.Deleg {
		t.Fatalf("no write delegation granted: %+v", resp)
	}
	if early != nil {
		// Answered before the delegation was known: the answer is void
		// only if r is told to drop it.
		next := <-acked
		if !slices.Contains(next.Paths, "a") {
			t.Fatalf("the reader was answered %d bytes while the writer was being granted a delegation, and nothing recalls that answer: the writer's kept-back writes stay invisible to it", early.a.Size)
		}
		return
	}
	// The writer answers the recall: its writes, then the return.
	rec := ag.poll("w", ws, 5*time.Second)
	if len(rec.Recalls) != 1 || rec.Recalls[0].Path != "a" {
		t.Fatalf("recalls sent to the writer: %+v", rec.Recalls)
	}
	data := []byte("kept back")
	if _, err := ag.serve("w", wire.OpWrite, wire.WriteReq{Tok: 1, Handle: resp.Handle}, data); err != nil {
		t.Fatal(err)
	}
	if _, err := ag.serve("w", wire.OpDelegReturn, wire.DelegReturnReq{Tok: 1, Session: "w", Path: "a", Done: true}, nil); err != nil {
		t.Fatal(err)
	}
	res := <-looked
	if res.err != nil || res.a.Size != int64(len(data)) {
		t.Fatalf("the reader sees %d bytes (%v), want the writer's %d", res.a.Size, res.err, len(data))
	}
}

// TestReclaimRecallsReadHolds: a reclaim of a delegation the share does
// not list (it was revoked when its holder's lease ran out, say) is granted
// as a new delegation, and recalls other agents' read holds as any grant
// does: the reader may have read the share's copy meanwhile, and the
// holder keeps its writes back again.
func TestReclaimRecallsReadHolds(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	ag := newAgents(t, root, "w", "r")
	ag.poll("w", 0, time.Millisecond)
	rs := ag.poll("r", 0, time.Millisecond).Stamp
	if _, err := ag.stat("r", "a"); err != nil { // r holds a
		t.Fatal(err)
	}
	opened := ag.open("w", "a", wire.OpenRead|wire.OpenWrite|wire.OpenDeleg|wire.OpenReclaim)
	inv := ag.poll("r", rs, time.Second)
	go ag.poll("r", inv.Stamp, 200*time.Millisecond)
	if resp, ok := <-opened; !ok || !resp.Deleg {
		t.Fatalf("the reclaim was refused: %+v", resp)
	}
	if !slices.Contains(inv.Paths, "a") {
		t.Fatalf("a delegation was granted by a reclaim, and the reader's hold on the file was not recalled: %+v", inv)
	}
}

// TestLateReturnLeavesLaterDelegation: a return of a delegation the share
// has taken back already (answered twice, or late) must not end the next
// delegation of the same file, granted meanwhile to the same agent: that
// agent keeps writes back under it, and readers would no longer wait for
// them.
func TestLateReturnLeavesLaterDelegation(t *testing.T) {
	tab := newInvTable(time.Now)
	tab.longPoll("h", 0, 0, time.Millisecond, 5*time.Second)
	first := tab.grantWrite("h", "f", false)
	if first == 0 {
		t.Fatal("no delegation granted")
	}
	if again := tab.grantWrite("h", "f", false); again != first {
		t.Fatalf("the holder asking again got delegation %d, not the one it holds (%d)", again, first)
	}
	tab.longPoll("r", 0, 0, time.Millisecond, 5*time.Second)
	done := await(tab, "r", "f", firstBlock, true)
	var recalls []wire.Recall
	for i := 0; i < 100 && len(recalls) == 0; i++ {
		tab.mu.Lock()
		recalls = tab.recallsFor("h", time.Now())
		tab.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	if len(recalls) != 1 || recalls[0].ID != first {
		t.Fatalf("recalls %+v, want one of delegation %d", recalls, first)
	}
	tab.returnDeleg("h", "f", first, nil, true)
	if !doneWithin(done, 5*time.Second) {
		t.Fatal("the request still waits after the return")
	}
	second := tab.grantWrite("h", "f", false)
	if second == 0 || second == first {
		t.Fatalf("the next delegation got id %d (the first: %d)", second, first)
	}
	tab.returnDeleg("h", "f", first, nil, true) // the first one's return, again
	if !tab.delegated("f") {
		t.Fatal("a late return of the first delegation ended the second")
	}
	if tab.failReturn("h", "f", first, &wire.Error{Code: wire.CodeNoSpace}) {
		t.Fatal("a late failure of the first delegation was taken for the second's")
	}
	tab.returnDeleg("h", "f", second, nil, true)
	if tab.delegated("f") {
		t.Fatal("the return of the delegation held did not end it")
	}
}
