package share

import (
	"errors"

	"pando.dev/pando/internal/auth"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Rights are decided on the path a request reaches (docs/security.md,
// "Rights follow the object"): every operation resolves the path its
// client named (tree.resolve) and checks the token there.

// reach resolves the path a client named (see tree.resolve; its last
// component too if follow) and checks that tok grants need on the path
// reached, which it returns: rights are decided on the object, however it
// was named.
func (s *Server) reach(req *rpc.Request, tok uint32, named string, follow bool, need auth.Rights) (*auth.Token, string, error) {
	rel, err := s.resolve(named, follow)
	if err != nil {
		return nil, "", err
	}
	t, err := s.allowReached(req, tok, named, rel, need)
	return t, rel, err
}

// allowReached is allow on rel, reached from the path named: a refusal
// says where a symlink led.
func (s *Server) allowReached(req *rpc.Request, tok uint32, named, rel string, need auth.Rights) (*auth.Token, error) {
	if _, err := auth.CleanRel(rel); err != nil {
		return nil, uncleanPath(err)
	}
	t, err := s.token(req, tok)
	if err != nil {
		return nil, err
	}
	where, paths := "/"+rel, []string{rel}
	if rel != named {
		where += ", where the symlink on /" + named + " leads"
		paths = append(paths, named)
	}
	if !t.Covers(rel) {
		return nil, &wire.Error{Code: wire.CodeAccess, Paths: paths, Message: where + " is outside the part of share " + s.cfg.Name + " your token covers"}
	}
	have := t.RightsAt(rel)
	if !have.Has(need) {
		missing := need &^ have
		why := "ask an administrator of the domain (pando acl set)"
		if sc := t.Scopes; sc != "" {
			if len(sc) > 200 {
				sc = sc[:200] + "..."
			}
			why = "its bearer token's scopes (" + sc + ") and the ACLs allow no more"
		}
		return nil, &wire.Error{
			Code:    wire.CodeAccess,
			Missing: missing.String(),
			Paths:   paths,
			Message: t.Principal + " lacks the " + missing.Describe() + " right (" + missing.String() + ") on " + where + "; domain " + s.cfg.Domain + " decided: " + why,
		}
	}
	// Whatever the session learns of rel from here on is under a read
	// delegation (callback sessions), granted before it is read, once any
	// other agent's write delegation on it is returned.
	if err := s.touch(req, rel, firstBlock); err != nil {
		return nil, err
	}
	return t, nil
}

// uncleanPath is the refusal of a path auth.CleanRel refused: too long
// (ENAMETOOLONG, as a file system says), or one that could leave the share.
func uncleanPath(err error) *wire.Error {
	if errors.Is(err, auth.ErrTooLong) {
		return &wire.Error{Code: wire.CodeNameTooLong, Message: err.Error()}
	}
	return &wire.Error{Code: wire.CodeEscape, Message: err.Error()}
}

// resolve checks that a client's path is clean and returns what it reaches.
func (s *Server) resolve(named string, follow bool) (string, error) {
	if _, err := auth.CleanRel(named); err != nil {
		return "", uncleanPath(err)
	}
	rel, err := s.tree.resolve(named, follow)
	if isStaging(named) || err == nil && isStaging(rel) {
		// Stages hold other clients' data on its way to files they may
		// not share: nobody reaches them by name.
		return "", &wire.Error{Code: wire.CodeAccess, Paths: []string{named},
			Message: "/" + named + ": names that begin with " + stagePrefix + " or " + journalPrefix + " in the root of a share are the share's own; choose another name"}
	}
	return rel, err
}

// allow checks that tok is valid, covers rel (a resolved path: see reach)
// and grants need there.
func (s *Server) allow(req *rpc.Request, tok uint32, rel string, need auth.Rights) (*auth.Token, error) {
	return s.allowReached(req, tok, rel, rel, need)
}
