// Package audit keeps the record of who was granted or refused what, and
// of the changes administrators make: one JSON object a line, appended to
// audit.jsonl in the state directory of a controller or share
// (docs/security.md, "Audit").
//
// A Log never holds a request up: Write puts the record on a bounded queue
// and returns; one goroutine appends what is queued. When the queue is full
// the record is dropped and counted, and once the queue has room again one
// record (Action "audit-dropped") says how many were lost. The file is
// bounded: when it would pass half of MaxSize it becomes audit.jsonl.1
// (replacing the older one) and a new audit.jsonl begins, so the two never
// hold more than MaxSize together.
//
// Read and Decode read the files back; they take them as untrusted (an
// operator may have edited them): a line that is not a record is skipped
// and reported, never fatal.
package audit

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// FileName is the name of the log in a state directory; the older file
// is FileName + ".1".
const FileName = "audit.jsonl"

// Results.
const (
	Granted = "granted" // the request, or the change, was allowed
	Refused = "refused" // it was refused (Detail says why, as the refusal did)
	Noted   = "noted"   // neither: a fact about the log itself (records dropped)
)

// Actions that are not a wire op's name. Records of requests name the op
// ("resolve", "acl-set", "open", ...); these name the rest.
const (
	ActionDropped      = "audit-dropped" // Detail: how many records the full queue lost
	ActionConnect      = "connect"       // a connection, refused by the server
	ActionToken        = "token"         // a token presented to a share
	ActionDomainLink   = "domain-link"   // a link to another domain made or changed
	ActionDomainUnlink = "domain-unlink" // a link ended
)

// Record is one line of the log. Every field but Time, Action and Result
// may be empty.
type Record struct {
	// Time is when the server decided (UTC, nanoseconds).
	Time time.Time `json:"time"`
	// Who is the principal that asked: "alice@uva", "share:data@uva";
	// for a refused connection, whatever its certificate said (or "").
	Who string `json:"who,omitempty"`
	// Action is what was asked: a wire op's name ("resolve", "acl-set",
	// "open", "mkdir"), or one of the Action constants.
	Action string `json:"action"`
	// Path is the path concerned: global ("/uva/data/x") at a controller,
	// share-relative ("x/y", "" for the root) at a share.
	Path string `json:"path,omitempty"`
	// Rights are the rights granted (a grant) or missing (a refusal),
	// in pando's letters ("rl", "w").
	Rights string `json:"rights,omitempty"`
	// Result is Granted, Refused or Noted.
	Result string `json:"result"`
	// From is the remote address the request came from.
	From string `json:"from,omitempty"`
	// Domain is the domain that decided (the server's own).
	Domain string `json:"domain,omitempty"`
	// Server is who wrote the record: "controller@uva", "share:data@uva".
	Server string `json:"server,omitempty"`
	// Detail says more in a short sentence: a refusal's message, an
	// administrative change's arguments.
	Detail string `json:"detail,omitempty"`
}

// MaxDetail bounds Detail (and each other string) as written: longer ones
// are cut, so that a client's long path cannot make a line unreadable.
const MaxDetail = 2048

// Defaults of Options.
const (
	DefaultMaxSize = 64 << 20
	DefaultQueue   = 4096
)

// Options tune a Log.
type Options struct {
	// MaxSize bounds the two files together (default DefaultMaxSize).
	MaxSize int64
	// Queue is how many records may wait to be written (default
	// DefaultQueue); more are dropped and counted.
	Queue int
	// Server and Domain fill the records that leave them empty.
	Server, Domain string
	// Log receives the errors of writing (nil: none).
	Log *slog.Logger
}

// Log appends records to one file. A nil *Log is valid and writes
// nothing, so that a server without a state directory needs no branch.
type Log struct {
	path string
	opt  Options
	q    chan item
	done chan struct{}

	dropped atomic.Uint64

	closeOnce sync.Once
	mu        sync.RWMutex // held to send on q, and to close it
	closed    bool

	f    *os.File // the writer goroutine's only
	size int64
}

type item struct {
	rec   Record
	flush chan struct{} // set: a Flush marker, closed once written
}

// Open opens (creating if need be) the log at path and starts its writer.
func Open(path string, opt Options) (*Log, error) {
	if opt.MaxSize <= 0 {
		opt.MaxSize = DefaultMaxSize
	}
	if opt.Queue <= 0 {
		opt.Queue = DefaultQueue
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot open the audit log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("cannot open the audit log: %w", err)
	}
	l := &Log{path: path, opt: opt, q: make(chan item, opt.Queue), done: make(chan struct{}), f: f, size: st.Size()}
	go l.run()
	return l, nil
}

// Path is the file the log appends to.
func (l *Log) Path() string {
	if l == nil {
		return ""
	}
	return l.path
}

// Write queues r, filling Time (now), Server and Domain if empty. It
// never blocks: with the queue full, r is dropped and counted.
func (l *Log) Write(r Record) {
	if l == nil {
		return
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	if r.Server == "" {
		r.Server = l.opt.Server
	}
	if r.Domain == "" {
		r.Domain = l.opt.Domain
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return
	}
	select {
	case l.q <- item{rec: r}:
	default:
		l.dropped.Add(1)
	}
}

// Dropped is how many records were dropped so far and not yet reported
// in the file.
func (l *Log) Dropped() uint64 {
	if l == nil {
		return 0
	}
	return l.dropped.Load()
}

// Flush waits until every record queued before it is in the file (or
// the log is closed).
func (l *Log) Flush() {
	if l == nil {
		return
	}
	ch := make(chan struct{})
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return
	}
	select {
	case l.q <- item{flush: ch}:
	case <-l.done:
	}
	l.mu.RUnlock()
	select {
	case <-ch:
	case <-l.done:
	}
}

// Close writes what is queued and closes the file. Records written after
// are ignored.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		close(l.q)
		l.mu.Unlock()
	})
	<-l.done
	return nil
}

// run is the writer: it appends what is queued, in batches, and says how
// many records were dropped once there is room.
func (l *Log) run() {
	defer close(l.done)
	defer func() { l.f.Close() }() // the file of the moment: rotate replaces it
	var buf []byte
	var flushes []chan struct{}
	for it := range l.q {
		buf, flushes = l.add(buf[:0], it, flushes[:0])
	drain:
		for len(buf) < 1<<20 {
			select {
			case it, ok := <-l.q:
				if !ok {
					break drain
				}
				buf, flushes = l.add(buf, it, flushes)
			default:
				break drain
			}
		}
		l.write(l.droppedLine(buf))
		for _, ch := range flushes {
			close(ch)
		}
	}
	l.write(l.droppedLine(nil))
}

// droppedLine appends to buf the record of the records dropped since the
// last, if any were.
func (l *Log) droppedLine(buf []byte) []byte {
	n := l.dropped.Swap(0)
	if n == 0 {
		return buf
	}
	return l.line(buf, Record{Time: time.Now(), Action: ActionDropped, Result: Noted,
		Server: l.opt.Server, Domain: l.opt.Domain,
		Detail: fmt.Sprintf("%d audit records were dropped: the queue of %d was full", n, l.opt.Queue)})
}

func (l *Log) add(buf []byte, it item, flushes []chan struct{}) ([]byte, []chan struct{}) {
	if it.flush != nil {
		return buf, append(flushes, it.flush)
	}
	return l.line(buf, it.rec), flushes
}

// line appends r to buf, the batch not yet written; when the file would
// pass half of MaxSize with it, the batch is written first and the file
// rotated.
func (l *Log) line(buf []byte, r Record) []byte {
	n := len(buf)
	buf = appendLine(buf, r)
	if l.size+int64(len(buf)) <= l.opt.MaxSize/2 || l.size+int64(n) == 0 {
		return buf
	}
	next := append([]byte(nil), buf[n:]...)
	l.write(buf[:n])
	l.rotate()
	return append(buf[:0], next...)
}

// appendLine appends r as one line of JSON, its strings cut to MaxDetail.
func appendLine(buf []byte, r Record) []byte {
	for _, s := range []*string{&r.Who, &r.Action, &r.Path, &r.Rights, &r.Result, &r.From, &r.Domain, &r.Server, &r.Detail} {
		*s = cut(*s)
	}
	r.Time = r.Time.UTC()
	b, err := json.Marshal(r)
	if err != nil { // a Record always encodes; keep the line anyway
		return buf
	}
	return append(append(buf, b...), '\n')
}

// cut cuts s to MaxDetail bytes, at a character's start.
func cut(s string) string {
	if len(s) <= MaxDetail {
		return s
	}
	n := MaxDetail
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// write appends b, whole lines, to the file.
func (l *Log) write(b []byte) {
	if len(b) == 0 {
		return
	}
	n, err := l.f.Write(b)
	l.size += int64(n)
	if err != nil {
		l.opt.Log.Error("cannot write the audit log", "file", l.path, "err", err)
	}
}

// rotate makes the file the older one and begins a new one.
func (l *Log) rotate() {
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		l.opt.Log.Error("cannot rotate the audit log", "file", l.path, "err", err)
		return
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		l.opt.Log.Error("cannot begin a new audit log", "file", l.path, "err", err)
		return // keep appending to the renamed file
	}
	l.f.Close()
	l.f, l.size = f, 0
}
