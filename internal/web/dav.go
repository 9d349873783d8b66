package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"net/http"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/net/webdav"

	"pando.dev/pando/internal/vfs"
)

// davFS is a user's vfs as golang.org/x/net/webdav wants it, for one
// request. The names it gets are cleaned by webdav (and checked by
// CleanPath before), and are global paths.
type davFS struct {
	v *vfs.FS
	// refused is the last error that davStatus answers as its own status
	// (a right missing, the share full or away): the webdav package
	// answers errors of its file system with 404, 405 or 500 whatever
	// they were.
	refused error
}

// davStatus replaces the status of an error response of the webdav
// handler by that of a refusal of the share the request met.
type davStatus struct {
	http.ResponseWriter
	fs *davFS
	s  *Server
}

func (d *davStatus) WriteHeader(code int) {
	if code >= 400 && d.fs.refused != nil && code != http.StatusPreconditionFailed && code != http.StatusLocked {
		code = Status(d.fs.refused)
		if code == http.StatusForbidden {
			d.s.c.Refused.Add(1)
		}
	}
	d.ResponseWriter.WriteHeader(code)
}

func (d *davFS) note(err error) error {
	if err == nil {
		return nil
	}
	switch Status(err) {
	case http.StatusForbidden, http.StatusInsufficientStorage, http.StatusServiceUnavailable, http.StatusRequestURITooLong:
		d.refused = err
	}
	return davErr(err)
}

// umask is taken from the modes the webdav package asks for (0666 and
// 0777), as a shell's would: nothing a gateway makes is writable by all.
const umask = 0o022

func (d *davFS) clean(name string) (string, error) {
	p, err := CleanPath(path.Clean("/" + name))
	if err != nil {
		return "", os.ErrInvalid
	}
	return p, nil
}

func davErr(err error) error {
	switch Errno(err) {
	case syscall.ENOENT:
		return os.ErrNotExist
	case syscall.EEXIST:
		return os.ErrExist
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return os.ErrPermission
	}
	return err
}

func (d *davFS) Mkdir(ctx context.Context, name string, perm os.FileMode) error {
	p, err := d.clean(name)
	if err != nil {
		return err
	}
	_, err = d.v.Mkdir(context.WithoutCancel(ctx), p, uint32(perm.Perm()&^umask))
	return d.note(err)
}

func (d *davFS) OpenFile(ctx context.Context, name string, flag int, perm os.FileMode) (webdav.File, error) {
	p, err := d.clean(name)
	if err != nil {
		return nil, err
	}
	f, err := OpenFile(ctx, d.v, p, flag, uint32(perm.Perm()&^umask))
	if err != nil {
		return nil, d.note(err)
	}
	f.dav = d
	return f, nil
}

func (d *davFS) RemoveAll(ctx context.Context, name string) error {
	p, err := d.clean(name)
	if err != nil {
		return err
	}
	if p == "/" {
		return os.ErrInvalid
	}
	return d.note(d.removeAll(context.WithoutCancel(ctx), p))
}

func (d *davFS) removeAll(ctx context.Context, p string) error {
	a, err := d.v.GetAttr(ctx, p)
	if err != nil {
		return err
	}
	if a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return d.v.Unlink(ctx, p)
	}
	ents, err := d.v.ReadDir(ctx, p)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Name == "." || e.Name == ".." {
			continue
		}
		if err := d.removeAll(ctx, path.Join(p, e.Name)); err != nil {
			return err
		}
	}
	return d.v.Rmdir(ctx, p)
}

func (d *davFS) Rename(ctx context.Context, oldName, newName string) error {
	op, err := d.clean(oldName)
	if err != nil {
		return err
	}
	np, err := d.clean(newName)
	if err != nil {
		return err
	}
	return d.note(d.v.Rename(context.WithoutCancel(ctx), op, np, false))
}

func (d *davFS) Stat(ctx context.Context, name string) (os.FileInfo, error) {
	p, err := d.clean(name)
	if err != nil {
		return nil, err
	}
	a, err := d.v.GetAttr(context.WithoutCancel(ctx), p)
	if err != nil {
		return nil, d.note(err)
	}
	return Info(path.Base(p), a), nil
}

// Dead properties (PROPPATCH) are kept in extended attributes of the
// file at its share, one per property: user.dav.<hash of its name>, whose
// value holds the name, language and XML value. They move and are
// removed with the file, and need the rights setxattr needs.
const davPropPrefix = "user.dav."

type davProp struct {
	Space string `json:"s"`
	Local string `json:"l"`
	Lang  string `json:"g,omitempty"`
	Inner []byte `json:"v"`
}

func davPropAttr(n xml.Name) string {
	sum := sha256.Sum256([]byte(n.Space + "\x00" + n.Local))
	return davPropPrefix + hex.EncodeToString(sum[:16])
}

// DeadProps returns the file's dead properties.
func (f *File) DeadProps() (map[xml.Name]webdav.Property, error) {
	names, err := f.v.ListXattr(f.ctx, f.p)
	if err != nil {
		return nil, davErr(err)
	}
	out := make(map[xml.Name]webdav.Property)
	for _, n := range names {
		if !strings.HasPrefix(n, davPropPrefix) {
			continue
		}
		b, err := f.v.GetXattr(f.ctx, f.p, n)
		if err != nil {
			continue // removed meanwhile
		}
		var dp davProp
		if json.Unmarshal(b, &dp) != nil {
			continue
		}
		name := xml.Name{Space: dp.Space, Local: dp.Local}
		out[name] = webdav.Property{XMLName: name, Lang: dp.Lang, InnerXML: dp.Inner}
	}
	return out, nil
}

// Patch sets and removes dead properties, in order.
func (f *File) Patch(patches []webdav.Proppatch) ([]webdav.Propstat, error) {
	st := webdav.Propstat{Status: http.StatusOK}
	for _, p := range patches {
		for _, prop := range p.Props {
			attr := davPropAttr(prop.XMLName)
			var err error
			if p.Remove {
				if err = f.v.RemoveXattr(f.ctx, f.p, attr); Errno(err) == syscall.ENODATA {
					err = nil
				}
			} else {
				b, _ := json.Marshal(davProp{Space: prop.XMLName.Space, Local: prop.XMLName.Local, Lang: prop.Lang, Inner: prop.InnerXML})
				err = f.v.SetXattr(f.ctx, f.p, attr, b, 0)
			}
			if err != nil {
				if f.dav != nil {
					return nil, f.dav.note(err)
				}
				return nil, davErr(err)
			}
			st.Props = append(st.Props, webdav.Property{XMLName: prop.XMLName})
		}
	}
	return []webdav.Propstat{st}, nil
}
