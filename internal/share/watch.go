package share

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/fsnotify/fsnotify"
)

// watcher reports changes made in the exported tree by local programs, so
// that polling agents hear of them (fsnotify; every directory is watched,
// new ones as they appear).
type watcher struct {
	w    *fsnotify.Watcher
	root string
	done chan struct{}
}

func watchTree(root string, changed func(paths ...string), log *slog.Logger) (*watcher, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &watcher{w: fw, root: filepath.Clean(root), done: make(chan struct{})}
	if err := w.addTree(w.root); err != nil {
		fw.Close()
		return nil, err
	}
	go func() {
		defer close(w.done)
		for {
			select {
			case ev, ok := <-fw.Events:
				if !ok {
					return
				}
				rel := w.rel(ev.Name)
				if rel == "." || isStaging(rel) {
					continue
				}
				changed(rel, parentOf(rel))
				if ev.Op&fsnotify.Create != 0 {
					if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
						_ = w.addTree(ev.Name)
					}
				}
			case err, ok := <-fw.Errors:
				if !ok {
					return
				}
				// An overflow loses events: everyone must revalidate.
				log.Warn("watching the exported directory", "err", err)
				changed("")
			}
		}
	}()
	return w, nil
}

func (w *watcher) rel(p string) string {
	r, err := filepath.Rel(w.root, p)
	if err != nil || strings.HasPrefix(r, "..") {
		return "."
	}
	return filepath.ToSlash(r)
}

func (w *watcher) addTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil // vanished meanwhile, or unreadable: skip
		}
		if d.IsDir() {
			if err := w.w.Add(p); err != nil {
				return err
			}
		}
		return nil
	})
}

func (w *watcher) close() {
	w.w.Close()
	<-w.done
}
