package share

import (
	"bytes"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// validateEntries bounds the entries one validation reads at the share
// (in all its directories): beyond it, the directories left are answered
// as changed (the agent lists them when it needs them).
const validateEntries = 1 << 20

// validate answers OpValidate: which of the listings an agent holds are
// what a readdir would return now (and which attributes what a getattr
// would). Each directory is reached and checked
// as a readdir would be (list right; under a callback session the hold on
// it is granted before it is read, so that a change after the comparison
// is recalled), listed here, and its sum compared with the agent's. A
// request that is malformed as a whole (too many directories, a path that
// is not clean, a sum of the wrong length) is refused before anything is
// looked at; a directory that is gone, no directory, or not listable is
// only answered as changed: the agent's readdir of it will say why.
func (s *Server) validate(req *rpc.Request) (rpc.Reply, error) {
	var r wire.ValidateReq
	if err := req.Decode(&r); err != nil {
		return rpc.Reply{}, err
	}
	if len(r.Dirs) > wire.ValidateMax {
		return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "a validation may name at most %d directories (this one named %d); send the rest in another", wire.ValidateMax, len(r.Dirs))
	}
	for _, d := range r.Dirs {
		if _, err := auth.CleanRel(d.Path); err != nil {
			return rpc.Reply{}, uncleanPath(err)
		}
		if len(d.Sum) != wire.ListingSumSize {
			return rpc.Reply{}, wire.Errorf(wire.CodeInvalid, "a validation gives each directory a listing sum of %d bytes; /%s has %d", wire.ListingSumSize, d.Path, len(d.Sum))
		}
	}
	if _, err := s.token(req, r.Tok); err != nil {
		return rpc.Reply{}, err
	}
	out := make([]byte, (len(r.Dirs)+7)/8)
	budget := validateEntries
	for i, d := range r.Dirs {
		if budget <= 0 {
			break
		}
		_, rel, err := s.reach(req, r.Tok, d.Path, !d.Attr, auth.List)
		if err != nil {
			continue
		}
		var sum []byte
		n := 0
		if d.Attr {
			var a wire.Attr
			if a, err = s.lstat(rel); err == nil {
				sum = wire.AttrSum(a)
			}
		} else {
			sum, n, err = s.listingSum(rel, budget)
		}
		budget -= n + 1
		if err == nil && bytes.Equal(sum, d.Sum) {
			out[i/8] |= 1 << (i % 8)
		}
	}
	return rpc.Reply{Msg: wire.ValidateResp{Unchanged: out}}, nil
}

// listingSum is the sum (wire.ListingSum) of the listing of rel as readdir
// gives it, page by page, and the entries it read; it stops with an error
// past max entries.
func (s *Server) listingSum(rel string, max int) ([]byte, int, error) {
	h := wire.NewListingHash()
	n := 0
	for after := ""; ; {
		page, err := s.readDir(rel, after, wire.ReadDirPage, nil)
		if err != nil {
			return nil, n, err
		}
		for _, e := range page.Entries {
			h.Add(e)
		}
		n += len(page.Entries)
		if n > max {
			return nil, n, errTooMany
		}
		if !page.More || len(page.Entries) == 0 {
			return h.Sum(page.Dir), n, nil
		}
		after = page.Entries[len(page.Entries)-1].Name
	}
}

var errTooMany = wire.Errorf(wire.CodeInvalid, "too many entries to validate in one request")
