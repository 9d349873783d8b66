package mount

import "strings"

// Children counts the inodes the mount holds of the entries of the
// directory at global path p (0 if it holds none of the directory).
func Children(m *Mount, p string) int {
	n := m.root.EmbeddedInode()
	for _, name := range strings.Split(strings.Trim(p, "/"), "/") {
		if n = n.GetChild(name); n == nil {
			return 0
		}
	}
	return len(n.Children())
}
