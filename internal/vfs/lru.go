package vfs

// lru is a map of cached metadata by path with a bound on its weight (an
// attribute weighs one, a listing one more than its entries): putting past
// the bound drops the least recently used entries. Dropping one is always
// safe (the next use asks the share). Not safe for concurrent use: the
// file system's lock guards it.
type lru[E any] struct {
	m      map[string]*lruNode[E]
	head   lruNode[E] // head.next is the most recently used, head.prev the least
	weight func(E) int
	n, max int
}

type lruNode[E any] struct {
	key        string
	e          E
	w          int
	prev, next *lruNode[E]
}

func newLRU[E any](max int, weight func(E) int) *lru[E] {
	l := &lru[E]{m: make(map[string]*lruNode[E]), weight: weight, max: max}
	l.head.prev, l.head.next = &l.head, &l.head
	return l
}

func (l *lru[E]) unlink(x *lruNode[E]) {
	x.prev.next, x.next.prev = x.next, x.prev
}

func (l *lru[E]) front(x *lruNode[E]) {
	x.prev, x.next = &l.head, l.head.next
	x.next.prev, l.head.next = x, x
}

// get returns the entry of key and marks it used.
func (l *lru[E]) get(key string) (E, bool) {
	x := l.m[key]
	if x == nil {
		var zero E
		return zero, false
	}
	l.unlink(x)
	l.front(x)
	return x.e, true
}

// put sets the entry of key, marks it used, and drops the least recently
// used entries while the weight is past the bound.
func (l *lru[E]) put(key string, e E) {
	w := 1
	if l.weight != nil {
		w = l.weight(e)
	}
	if x := l.m[key]; x != nil {
		l.n += w - x.w
		x.e, x.w = e, w
		l.unlink(x)
		l.front(x)
	} else {
		x := &lruNode[E]{key: key, e: e, w: w}
		l.m[key] = x
		l.n += w
		l.front(x)
	}
	for l.n > l.max && l.head.prev != l.head.next {
		l.del(l.head.prev.key)
	}
}

// del drops the entry of key.
func (l *lru[E]) del(key string) {
	if x := l.m[key]; x != nil {
		l.unlink(x)
		delete(l.m, key)
		l.n -= x.w
	}
}

// drop drops every entry for which fn says so.
func (l *lru[E]) drop(fn func(key string, e E) bool) {
	for k, x := range l.m {
		if fn(k, x.e) {
			l.del(k)
		}
	}
}

func (l *lru[E]) len() int { return len(l.m) }

// peek returns the entry of key (the zero entry if none) without marking
// it used.
func (l *lru[E]) peek(key string) E {
	if x := l.m[key]; x != nil {
		return x.e
	}
	var zero E
	return zero
}
