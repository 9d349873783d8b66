package wire

import (
	"strconv"
	"strings"
)

// Owners and groups travel as names, as in NFSv4: a principal
// ("alice@uva") or a grid group for an owner or a group, or "#N" for a
// local id N that has no name in the grid (a user of one host, as NFS's
// AUTH_SYS numbers are: meaningful among hosts that number alike). Each
// agent maps them to its local uids and gids (internal/mount/idmap.go).

// MaxIdent is the longest owner or group name.
const MaxIdent = 256

// ValidIdent reports whether s may name an owner or a group: 1 to
// MaxIdent bytes, none of them a control character or a space.
func ValidIdent(s string) bool {
	if s == "" || len(s) > MaxIdent {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return false
		}
	}
	if strings.HasPrefix(s, "#") {
		_, ok := NumericIdent(s)
		return ok
	}
	return true
}

// NumericIdent parses "#N".
func NumericIdent(s string) (uint32, bool) {
	if !strings.HasPrefix(s, "#") || len(s) < 2 || len(s) > 11 || s[1] == '+' || len(s) > 2 && s[1] == '0' {
		return 0, false
	}
	n, err := strconv.ParseUint(s[1:], 10, 32)
	if err != nil || n == 1<<32-1 {
		return 0, false
	}
	return uint32(n), true
}

// Numeric is "#N" for the local id n.
func Numeric(n uint32) string { return "#" + strconv.FormatUint(uint64(n), 10) }
