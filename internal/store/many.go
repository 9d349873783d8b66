package store

import (
	"context"
	"errors"
)

// Many is what ReadMany read: the value of each key found, and the keys
// under each prefix.
type Many struct {
	Values map[string][]byte
	Lists  map[string][]KV
}

// manyReader is an engine that reads several keys and prefixes at one
// moment in one request.
type manyReader interface {
	readMany(ctx context.Context, keys, prefixes []string) (Many, error)
}

// ReadMany reads keys and prefixes together: in one transaction of the
// engine where it has them (one etcd round trip, one bbolt read
// transaction), so that what it returns was all true at one moment. A key
// that is absent is absent from Values.
func ReadMany(ctx context.Context, s Store, keys, prefixes []string) (Many, error) {
	if m, ok := s.(manyReader); ok {
		return m.readMany(ctx, keys, prefixes)
	}
	out := Many{Values: map[string][]byte{}, Lists: map[string][]KV{}}
	for _, k := range keys {
		v, err := s.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return Many{}, err
		}
		out.Values[k] = v
	}
	for _, p := range prefixes {
		kvs, err := s.List(ctx, p)
		if err != nil {
			return Many{}, err
		}
		out.Lists[p] = kvs
	}
	return out, nil
}
