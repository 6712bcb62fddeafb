package sampling

import (
	"context"
	"sync"
	"time"

	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/host/plugin/allowlist"
)

// fileStamp is what the watcher compares between polls.
type fileStamp struct {
	mod  time.Time
	size int64
}

// Watch polls dir every interval (default 1s) for <name>.wasm samplers:
// a new or changed file is swapped in (source "folder"; a file overrides
// the built-in of the same name), a removed file is unloaded, or replaced
// by the built-in of that name if there is one. The folder is read as the
// plugin registry reads it (plugin.ScanFolder): only regular files within
// the size cap; anything else (a link to /dev/zero, a directory named
// x.wasm) is skipped with one warning. Files of another plugin kind
// (configurators) are left to their registry, noted once at debug level. A
// file that fails to load is logged and retried only when it changes
// again; the previous version keeps serving. The first scan runs before
// Watch returns. stop ends the polling and waits for it.
func (r *Registry) Watch(ctx context.Context, dir string, interval time.Duration) (stop func()) {
	if interval <= 0 {
		interval = time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{r: r, dir: dir, seen: map[string]fileStamp{}, warned: map[string]bool{}}
	w.scan(ctx)
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
				w.scan(ctx)
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
		st := fileStamp{e.ModTime, e.Size}
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
			continue // already the version serving (NewRegistry loaded the folder's file)
		}
		if err := r.Swap(ctx, e.Name, b, SourceFolder); err != nil {
			r.log.Error("sampler file refused; the previous version keeps serving", "file", e.Path, "err", firstLine(err))
		}
	}
	for name := range w.seen {
		if _, ok := now[name]; ok {
			continue
		}
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
