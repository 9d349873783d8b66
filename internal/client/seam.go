package client

import (
	"context"

	"pando.dev/pando/internal/remote"
	"pando.dev/pando/internal/wire"
)

// The client is the vfs's namespace as it is (its method set fits
// remote.Namespace); its data path is Data, whose handles are remote.File.
var (
	_ remote.Namespace = (*Client)(nil)
	_ remote.Data      = data{}
	_ remote.File      = file{}
	_ remote.Stage     = stage{}
)

// Data returns c's data path as the vfs holds it: Open, OpenFirst and
// Create of c, whose files and stages are remote.File and remote.Stage.
func Data(c *Client) remote.Data { return data{c} }

type data struct{ c *Client }

func (d data) Open(ctx context.Context, gpath string, flags uint32) (remote.File, error) {
	return wrapFile(d.c.Open(ctx, gpath, flags))
}

func (d data) OpenFirst(ctx context.Context, gpath string, flags uint32, n int) (remote.File, error) {
	return wrapFile(d.c.OpenFirst(ctx, gpath, flags, n))
}

func (d data) Create(ctx context.Context, gpath string, flags, mode uint32) (remote.File, error) {
	return wrapFile(d.c.Create(ctx, gpath, flags, mode))
}

// wrapFile keeps a failed open's result a nil interface.
func wrapFile(f *File, err error) (remote.File, error) {
	if err != nil {
		return nil, err
	}
	return file{f}, nil
}

// file is a *File whose stages are remote.Stage.
type file struct{ *File }

func (f file) Stage(ctx context.Context) (remote.Stage, error) { return f.StageNamed(ctx, "") }

func (f file) StageNamed(ctx context.Context, name string) (remote.Stage, error) {
	st, err := f.File.StageNamed(ctx, name)
	if err != nil {
		return nil, err
	}
	return stage{st}, nil
}

// stage is a *Stage with Held as a method.
type stage struct{ *Stage }

func (s stage) Held() []wire.ByteRange { return s.Stage.Held }
