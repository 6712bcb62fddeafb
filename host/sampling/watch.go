package sampling

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kvhost/kvhost/host/plugin"
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

// stamp is path's stamp through its links; ok is false for what cannot be
// stat'ed or is a directory.
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

// Watch polls dir every interval (default 1s) for <name>.wasm samplers:
// a new or changed file is swapped in (source "folder"; a file overrides
// the built-in of the same name), a removed file is unloaded, or replaced
// by the built-in of that name if there is one. The folder is read as the
// plugin registry reads it (plugin.ScanFolder): only regular files, links
// followed (a ConfigMap volume), within the size cap; anything else (a link
// to /dev/zero, a directory named x.wasm) is skipped with one warning.
// Files of another plugin kind (configurators) are left to their registry,
// noted once at debug level. A file that fails to load is logged and
// retried only when it changes again, or when Options.AllowlistFile
// changes (it is re-read first on every poll that finds it changed); the
// previous version keeps serving. The first scan runs before Watch
// returns. stop ends the polling and waits for it.
func (r *Registry) Watch(ctx context.Context, dir string, interval time.Duration) (stop func()) {
	if interval <= 0 {
		interval = time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{r: r, dir: dir, seen: map[string]fileStamp{}, warned: map[string]bool{}, failed: map[string]bool{}}
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

// watcher is one Watch's state, owned by its goroutine.
type watcher struct {
	r      *Registry
	dir    string
	seen   map[string]fileStamp // samplers (and other files) as last handled
	warned map[string]bool      // skipped entries already reported
	failed map[string]bool      // names whose last try was refused
	allow  fileStamp            // Options.AllowlistFile when last read
	polls  int
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
		w.r.log.Error("plugin allow-list refused; the previous list stays in force", "file", path, "err", err)
		return
	}
	if w.polls > 0 {
		w.r.log.Info("plugin allow-list reloaded", "file", path, "pins", len(entries))
	}
	for name := range w.failed {
		w.seen[name] = fileStamp{} // matches no file: tried again, still known if removed
	}
}

func (w *watcher) scan(ctx context.Context) {
	r := w.r
	max := r.MaxModuleBytes()
	entries, skipped, err := plugin.ScanFolder(w.dir, max)
	if err != nil {
		if !w.warned[""] {
			r.log.Warn("sampler folder unreadable", "dir", w.dir, "err", err)
			w.warned[""] = true
		}
		return
	}
	delete(w.warned, "")
	for _, err := range skipped {
		if msg := err.Error(); !w.warned[msg] {
			r.log.Warn("plugins folder entry skipped", "err", msg)
			w.warned[msg] = true
		}
	}
	now := map[string]fileStamp{}
	for _, e := range entries {
		st, ok := stamp(e.Path)
		if !ok {
			continue
		}
		now[e.Name] = st
		if prev, ok := w.seen[e.Name]; ok && prev == st {
			continue
		}
		b, err := plugin.ReadPluginFile(e.Path, max)
		if err != nil {
			r.log.Warn("plugins folder entry skipped", "err", err)
			continue
		}
		if kind, err := r.rt.KindOf(e.Name, b); err == nil && kind != plugin.KindSampler {
			r.log.Debug("plugins folder file is not a sampler; its registry serves it", "file", e.Path, "kind", kind)
			continue
		}
		if r.serving(e.Name, b) {
			delete(w.failed, e.Name)
			continue // already the version serving (NewRegistry loaded the folder's file)
		}
		if err := r.Swap(ctx, e.Name, b, SourceFolder); err != nil {
			w.failed[e.Name] = true
			r.log.Error("sampler file refused; the previous version keeps serving", "file", e.Path, "err", firstLine(err))
		} else {
			delete(w.failed, e.Name)
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
				folder := g.Value.source == SourceFolder
				g.Release()
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

// serving reports whether wasm, from the folder, is what name serves now.
func (r *Registry) serving(name string, wasm []byte) bool {
	e := r.entry(name)
	if e == nil {
		return false
	}
	g := e.acquire()
	if g == nil {
		return false
	}
	defer g.Release()
	return g.Value.source == SourceFolder && g.Value.mod.SHA256() == allowlist.Sum(wasm)
}
