package sampling

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kvhost/kvhost/host/plugin/allowlist"
)

// fileStamp is what the watcher compares between polls. Files are stat'ed
// through symlinks and the resolved path is part of the stamp: a
// Kubernetes ConfigMap volume holds <key> -> ..data/<key> links and
// updates by swapping ..data to a new directory, so the link itself never
// changes while what it points to does.
type fileStamp struct {
	mod  time.Time
	size int64
	path string
}

func stamp(path string) (fileStamp, bool) {
	info, err := os.Stat(path)
	if err != nil || info.IsDir() {
		return fileStamp{}, false
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fileStamp{}, false
	}
	return fileStamp{info.ModTime(), info.Size(), real}, true
}

// watcher is one Watch's state between polls.
type watcher struct {
	r      *Registry
	dir    string
	seen   map[string]fileStamp // <name> of <name>.wasm → its stamp when last tried
	failed map[string]bool      // names whose last try was refused
	allow  fileStamp            // Options.AllowlistFile when last read
	polls  int
}

// Watch polls dir every interval (default 1s) for <name>.wasm samplers:
// a new or changed file is swapped in (source "folder"; a file overrides
// the built-in of the same name), a removed file is unloaded, or replaced
// by the built-in of that name if there is one. A file that fails to load
// is logged and retried only when it changes again, or when
// Options.AllowlistFile changes (it is re-read first on every poll that
// finds it changed); the previous version keeps serving. Symlinked files
// (a ConfigMap volume) are followed. The first scan runs before Watch
// returns. stop ends the polling and waits for it.
func (r *Registry) Watch(ctx context.Context, dir string, interval time.Duration) (stop func()) {
	if interval <= 0 {
		interval = time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{r: r, dir: dir, seen: map[string]fileStamp{}, failed: map[string]bool{}}
	w.poll(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.poll(ctx)
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

func (w *watcher) poll(ctx context.Context) {
	w.reloadAllowlist()
	w.scan(ctx)
	w.polls++
}

// reloadAllowlist re-reads Options.AllowlistFile when its stamp changed;
// on success the files refused so far get another try.
func (w *watcher) reloadAllowlist() {
	path := w.r.opts.AllowlistFile
	if path == "" {
		return
	}
	st, ok := stamp(path)
	if !ok || st == w.allow {
		return
	}
	w.allow = st
	entries, err := allowlist.ReadFile(path)
	if err == nil {
		err = w.r.SetAllowSHA256(entries)
	}
	if err != nil {
		w.r.log.Error("sampler allow-list refused; the previous list stays in force", "file", path, "err", err)
		return
	}
	if w.polls > 0 {
		w.r.log.Info("sampler allow-list reloaded", "file", path, "pins", len(entries))
	}
	for name := range w.failed {
		w.seen[name] = fileStamp{} // matches no file: tried again, still known if removed
	}
}

func (w *watcher) scan(ctx context.Context) {
	r := w.r
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		r.log.Warn("sampler folder unreadable", "dir", w.dir, "err", err)
		return
	}
	now := map[string]fileStamp{}
	for _, de := range entries {
		name, ok := strings.CutSuffix(de.Name(), ".wasm")
		if !ok || strings.HasPrefix(de.Name(), "..") {
			continue
		}
		path := filepath.Join(w.dir, de.Name())
		st, ok := stamp(path)
		if !ok {
			continue
		}
		now[name] = st
		if prev, ok := w.seen[name]; ok && prev == st {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			r.log.Warn("sampler file unreadable", "file", de.Name(), "err", err)
			continue
		}
		if err := r.Swap(ctx, name, b, SourceFolder); err != nil {
			w.failed[name] = true
			r.log.Error("sampler file refused; the previous version keeps serving", "file", de.Name(), "err", err)
		} else {
			delete(w.failed, name)
		}
	}
	for name := range w.seen {
		if _, ok := now[name]; ok {
			continue
		}
		delete(w.failed, name)
		if b, ok := r.builtins[name]; ok {
			if err := r.Swap(ctx, name, b, SourceBuiltin); err != nil {
				r.log.Error("restoring built-in sampler", "name", name, "err", err)
			}
		} else if e := r.entry(name); e != nil {
			if g := e.acquire(); g != nil {
				folder := g.source == SourceFolder
				g.release()
				if folder {
					_ = r.Remove(name)
				}
			}
		}
	}
	clear(w.seen)
	for k, v := range now {
		w.seen[k] = v
	}
}
