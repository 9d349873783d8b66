package auth

import (
	"fmt"
	"strings"
)

// Limits on share-relative paths.
const (
	MaxPath      = 4096
	MaxComponent = 255
)

// CleanRel checks a share-relative path from the wire: "" is the share's
// root, otherwise slash-separated names with no "", "." or ".." component,
// no leading slash and no NUL. It returns the path unchanged when valid.
func CleanRel(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if len(p) > MaxPath {
		return "", fmt.Errorf("path of %d bytes exceeds %d", len(p), MaxPath)
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
			return "", fmt.Errorf("a name in path %q exceeds %d bytes", p, MaxComponent)
		}
	}
	return p, nil
}

// IsUnder reports whether rel is root or below it (component-wise).
func IsUnder(rel, root string) bool {
	return root == "" || rel == root || strings.HasPrefix(rel, root+"/")
}
