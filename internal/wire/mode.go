package wire

import (
	"io/fs"
	"syscall"
)

// FileMode converts Unix mode bits (type, permissions, setuid, setgid,
// sticky), as Attr.Mode carries them, to an fs.FileMode.
func FileMode(m uint32) fs.FileMode {
	fm := fs.FileMode(m & 0o777)
	switch m & syscall.S_IFMT {
	case syscall.S_IFDIR:
		fm |= fs.ModeDir
	case syscall.S_IFLNK:
		fm |= fs.ModeSymlink
	case syscall.S_IFIFO:
		fm |= fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		fm |= fs.ModeSocket
	case syscall.S_IFCHR:
		fm |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFBLK:
		fm |= fs.ModeDevice
	}
	if m&syscall.S_ISUID != 0 {
		fm |= fs.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		fm |= fs.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		fm |= fs.ModeSticky
	}
	return fm
}
