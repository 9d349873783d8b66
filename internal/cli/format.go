package cli

import (
	"fmt"
	"io"
	"math"
	"strconv"
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

// Listing writes directory entries, short (names, directories with a
// slash) or long, in ls -l's columns: mode, links, owner, group, size
// (human-readable with human), time, name.
func Listing(w io.Writer, entries []wire.DirEntry, long, human bool, linkTarget func(name string) string) error {
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
	rows := make([][6]string, 0, len(entries))
	var width [6]int
	for _, e := range entries {
		size := strconv.FormatInt(e.Attr.Size, 10)
		if human {
			size = HumanSize(e.Attr.Size)
		}
		r := [6]string{Mode(e.Attr.Mode), strconv.FormatUint(uint64(e.Attr.Nlink), 10), ownerOf(e.Attr), groupOf(e.Attr), size, Time(e.Attr.Mtime)}
		for i, c := range r {
			width[i] = max(width[i], len(c))
		}
		rows = append(rows, r)
	}
	for i, e := range entries {
		name := e.Name
		if IsLink(e.Attr.Mode) && linkTarget != nil {
			name += " -> " + linkTarget(e.Name)
		}
		r := rows[i]
		// Numbers right-aligned, words left-aligned, one space between, as
		// coreutils' ls -l.
		if _, err := fmt.Fprintf(w, "%-*s %*s %-*s %-*s %*s %s %s\n", width[0], r[0], width[1], r[1], width[2], r[2], width[3], r[3],
			width[4], r[4], r[5], name); err != nil {
			return err
		}
	}
	return nil
}

// HumanSize renders a byte count as ls -h does: 512, 1.5K, 23M, 4.0G.
func HumanSize(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10)
	}
	f := float64(n)
	for _, u := range "KMGTPE" {
		f /= 1024
		if f < 1024 || u == 'E' {
			if f < 10 {
				return fmt.Sprintf("%.1f%c", math.Ceil(f*10)/10, u)
			}
			return fmt.Sprintf("%.0f%c", math.Ceil(f), u)
		}
	}
	return strconv.FormatInt(n, 10)
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
