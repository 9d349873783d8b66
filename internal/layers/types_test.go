package layers

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// An edge that imports only the vfs could still reach below it through
// what the vfs hands out: a method that returns a *client.Client, a field
// of a cache type. TestEdgesSeeNothingBelowTheVfs type-checks each edge
// (go/types, with the compiler's export data of its imports from go list)
// and fails on every method called, or field read, that is declared in a
// package below the vfs or whose type names one.

// belowVfs reports whether the package path names a layer below the vfs
// that edges must not see: of the ranked packages, those under the vfs's
// rank but wire (the types of the vfs's API) and the utilities.
func belowVfs(path string) bool {
	pkg, ok := strings.CutPrefix(path, mod)
	if !ok || pkg == "internal/wire" {
		return false
	}
	r, known := rank[pkg]
	return known && r >= 0 && r < rank["internal/vfs"]
}

// mentionsBelow returns the first type below the vfs that t names, or "".
func mentionsBelow(t types.Type) string {
	switch t := t.(type) {
	case *types.Named:
		if pkg := t.Obj().Pkg(); pkg != nil && belowVfs(pkg.Path()) {
			return t.String()
		}
		for i := range t.TypeArgs().Len() {
			if s := mentionsBelow(t.TypeArgs().At(i)); s != "" {
				return s
			}
		}
	case *types.Alias:
		return mentionsBelow(types.Unalias(t))
	case *types.Pointer:
		return mentionsBelow(t.Elem())
	case *types.Slice:
		return mentionsBelow(t.Elem())
	case *types.Array:
		return mentionsBelow(t.Elem())
	case *types.Chan:
		return mentionsBelow(t.Elem())
	case *types.Map:
		if s := mentionsBelow(t.Key()); s != "" {
			return s
		}
		return mentionsBelow(t.Elem())
	case *types.Tuple:
		for i := range t.Len() {
			if s := mentionsBelow(t.At(i).Type()); s != "" {
				return s
			}
		}
	case *types.Signature:
		if s := mentionsBelow(t.Params()); s != "" {
			return s
		}
		return mentionsBelow(t.Results())
	case *types.Struct:
		for i := range t.NumFields() {
			if s := mentionsBelow(t.Field(i).Type()); s != "" {
				return s
			}
		}
	}
	return ""
}

// reachesBelow lists, in the order of the source, the places in the
// checked files where a method called or a field read is declared below
// the vfs or has a type that names such a type, or where a name another
// package declares (a function, a variable, a type: vfs.X) has a type
// that does.
func reachesBelow(fset *token.FileSet, info *types.Info, files []*ast.File) []string {
	type found struct {
		pos token.Pos
		s   string
	}
	var all []found
	for sel, s := range info.Selections {
		obj := s.Obj()
		var why string
		switch {
		case obj.Pkg() != nil && belowVfs(obj.Pkg().Path()):
			why = "is declared in " + obj.Pkg().Path()
		default:
			if t := mentionsBelow(obj.Type()); t != "" {
				why = "has a type that names " + t
			}
		}
		if why != "" {
			kind := "method"
			if s.Kind() == types.FieldVal {
				kind = "field"
			}
			all = append(all, found{sel.Sel.Pos(), fmt.Sprintf("%s: %s %s %s", fset.Position(sel.Sel.Pos()), kind, obj.Name(), why)})
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || info.Selections[sel] != nil {
				return true
			}
			obj := info.Uses[sel.Sel]
			if obj == nil || obj.Pkg() == nil || isLocal(info, sel) {
				return true
			}
			if t := mentionsBelow(obj.Type()); t != "" {
				all = append(all, found{sel.Sel.Pos(), fmt.Sprintf("%s: %s.%s has a type that names %s", fset.Position(sel.Sel.Pos()), obj.Pkg().Name(), obj.Name(), t)})
			}
			return true
		})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].pos < all[j].pos })
	var out []string
	for _, f := range all {
		out = append(out, f.s)
	}
	return out
}

// isLocal reports whether sel is not a qualified identifier (pkg.Name).
func isLocal(info *types.Info, sel *ast.SelectorExpr) bool {
	id, ok := sel.X.(*ast.Ident)
	if !ok {
		return true
	}
	_, isPkg := info.Uses[id].(*types.PkgName)
	return !isPkg
}

// pkgInfo is what go list says of a package.
type pkgInfo struct {
	ImportPath string
	Dir        string
	Export     string
	GoFiles    []string
}

// listExport runs go list -deps -export on pkgs: every package they
// need, with the file of its export data.
func listExport(t *testing.T, pkgs ...string) map[string]pkgInfo {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-export", "-json=ImportPath,Dir,Export,GoFiles"}, pkgs...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	m := make(map[string]pkgInfo)
	dec := json.NewDecoder(out)
	for {
		var p pkgInfo
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list's output: %v", err)
		}
		m[p.ImportPath] = p
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	return m
}

// check type-checks files as package path, its imports read from the
// export data listed in pkgs.
func check(fset *token.FileSet, pkgs map[string]pkgInfo, path string, files []*ast.File) (*types.Info, error) {
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		p, ok := pkgs[path]
		if !ok || p.Export == "" {
			return nil, fmt.Errorf("go list gave no export data of %s", path)
		}
		return os.Open(p.Export)
	})
	info := &types.Info{Selections: make(map[*ast.SelectorExpr]*types.Selection), Uses: make(map[*ast.Ident]types.Object)}
	conf := types.Config{Importer: imp}
	_, err := conf.Check(path, fset, files, info)
	return info, err
}

func TestEdgesSeeNothingBelowTheVfs(t *testing.T) {
	var edgePkgs []string
	for e := range edges {
		edgePkgs = append(edgePkgs, mod+e)
	}
	sort.Strings(edgePkgs)
	pkgs := listExport(t, edgePkgs...)
	for _, path := range edgePkgs {
		p := pkgs[path]
		fset := token.NewFileSet()
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		if len(files) == 0 {
			t.Fatalf("go list named no files of %s", path)
		}
		info, err := check(fset, pkgs, path, files)
		if err != nil {
			t.Fatalf("type-checking %s: %v", path, err)
		}
		if len(info.Selections) < 50 {
			t.Fatalf("%s: %d selections seen; the check reads the package wrong", path, len(info.Selections))
		}
		for _, r := range reachesBelow(fset, info, files) {
			t.Errorf("edge %s reaches below the vfs: %s; ask the vfs for it in its own or wire's types", strings.TrimPrefix(path, mod), r)
		}
	}
}

// The check catches an edge that reaches the client through what the vfs
// hands out (it hands out nothing of the cache), and passes one that keeps
// to the vfs's types.
func TestReachesBelowCatches(t *testing.T) {
	pkgs := listExport(t, mod+"internal/vfs", mod+"internal/agent")
	for _, c := range []struct {
		src  string
		want []string
	}{
		{`package edge

import (
	"context"

	"pando.dev/pando/internal/private"
	"pando.dev/pando/internal/vfs"
)

func f(ctx context.Context, v *vfs.FS, p *private.Private) {
	_ = v.Principal()
	_, _ = v.ShareOf(ctx, "/d")
	c := p.Client()
	_ = c.Principal()
	_ = private.Open
}
`, []string{
			"edge.go:13:9: method Client has a type that names pando.dev/pando/internal/client.Client",
			"edge.go:14:8: method Principal is declared in pando.dev/pando/internal/client",
			"edge.go:15:14: private.Open has a type that names pando.dev/pando/internal/config.Config",
		}},
		{`package edge

import (
	"context"
	"syscall"

	"pando.dev/pando/internal/vfs"
)

func f(ctx context.Context, v *vfs.FS) {
	h, err := v.OpenFile(ctx, "/d/f", syscall.O_RDONLY, 0)
	if err == nil {
		_ = h.Attr().Size
		_ = h.Close(ctx)
	}
}
`, nil},
	} {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "edge.go", c.src, 0)
		if err != nil {
			t.Fatal(err)
		}
		info, err := check(fset, pkgs, "edge", []*ast.File{f})
		if err != nil {
			t.Fatalf("type-checking the example: %v", err)
		}
		got := reachesBelow(fset, info, []*ast.File{f})
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("reachesBelow of\n%s\n= %q\nwant %q", c.src, got, c.want)
		}
	}
}
