package cli

import (
	"fmt"
	"io"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"pando.dev/pando/internal/wire"
)

// Mode renders Unix mode bits like ls -l ("drwxr-xr-x").
func Mode(m uint32) string { return wire.FileMode(m).String() }

// IsDir reports whether mode bits name a directory.
func IsDir(m uint32) bool { return m&syscall.S_IFMT == syscall.S_IFDIR }

// IsLink reports whether mode bits name a symlink.
func IsLink(m uint32) bool { return m&syscall.S_IFMT == syscall.S_IFLNK }

// Size renders a byte count for people ("1.5 GiB").
func Size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// Listing writes directory entries, long or short.
func Listing(w io.Writer, entries []wire.DirEntry, long bool, linkTarget func(name string) string) error {
	if !long {
		for _, e := range entries {
			name := e.Name
			if IsDir(e.Attr.Mode) {
				name += "/"
			}
			if _, err := fmt.Fprintln(w, name); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', tabwriter.AlignRight)
	for _, e := range entries {
		name := e.Name
		if IsLink(e.Attr.Mode) && linkTarget != nil {
			name += " -> " + linkTarget(e.Name)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t %s\t %s\n", Mode(e.Attr.Mode), e.Attr.Nlink, e.Attr.Size, Time(e.Attr.Mtime), name)
	}
	return tw.Flush()
}

// Time renders unix nanoseconds like ls does.
func Time(ns int64) string {
	if ns == 0 {
		return "-"
	}
	t := time.Unix(0, ns)
	if time.Since(t) > 180*24*time.Hour || time.Until(t) > time.Hour {
		return t.Format("Jan _2  2006")
	}
	return t.Format("Jan _2 15:04")
}

// Stat writes one file's attributes, one per line.
func Stat(w io.Writer, name string, a wire.Attr) {
	kind := "regular file"
	switch a.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		kind = "directory"
	case syscall.S_IFLNK:
		kind = "symbolic link"
	}
	fmt.Fprintf(w, "  File: %s\n  Size: %d (%s)\t%s\n  Mode: %s (%04o)\tLinks: %d\tInode: %d\n", name, a.Size, Size(a.Size), kind, Mode(a.Mode), a.Mode&0o7777, a.Nlink, a.Ino)
	fmt.Fprintf(w, "Access: %s\nModify: %s\nChange: %s\nVersion: %d\n", ts(a.Atime), ts(a.Mtime), ts(a.Ctime), a.Version)
}

func ts(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return time.Unix(0, ns).Format("2006-01-02 15:04:05.000000000 -0700")
}

// Table writes rows aligned in columns; the first row is the header.
func Table(w io.Writer, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}
