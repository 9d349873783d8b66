package auth

import (
	"errors"
	"fmt"
	"strings"
)

// Limits on share-relative paths.
const (
	// MaxPath bounds a share-relative path. It is above Linux's PATH_MAX
	// (4096), which bounds one system call's path: a program may name a
	// file of PATH_MAX bytes relative to a directory deep in a share.
	MaxPath      = 16384
	MaxComponent = 255
)

// ErrTooLong is what a path over MaxPath bytes, or with a name over
// MaxComponent, is refused as (errors.Is); a file system says
// ENAMETOOLONG.
var ErrTooLong = errors.New("name too long")

// tooLong is a refusal of a path for its length.
type tooLong string

func (e tooLong) Error() string        { return string(e) }
func (e tooLong) Is(target error) bool { return target == ErrTooLong }

// CleanRel checks a share-relative path from the wire: "" is the share's
// root, otherwise slash-separated names with no "", "." or ".." component,
// no leading slash and no NUL. It returns the path unchanged when valid.
func CleanRel(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if len(p) > MaxPath {
		return "", tooLong(fmt.Sprintf("path of %d bytes exceeds %d", len(p), MaxPath))
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	if p[0] == '/' {
		return "", fmt.Errorf("path %q is absolute; paths must stay inside the share", p)
	}
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "..":
			return "", fmt.Errorf("path %q contains '..'; paths must stay inside the share", p)
		case c == "." || c == "":
			return "", fmt.Errorf("path %q is not clean (empty or '.' component)", p)
		case len(c) > MaxComponent:
			return "", tooLong(fmt.Sprintf("a name in path %q exceeds %d bytes", p, MaxComponent))
		}
	}
	return p, nil
}

// IsUnder reports whether rel is root or below it (component-wise).
func IsUnder(rel, root string) bool {
	return root == "" || rel == root || strings.HasPrefix(rel, root+"/")
}
