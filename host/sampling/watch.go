package sampling

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// fileStamp is what the watcher compares between polls.
type fileStamp struct {
	mod  time.Time
	size int64
}

// Watch polls dir every interval (default 1s) for <name>.wasm samplers:
// a new or changed file is swapped in (source "folder"; a file overrides
// the built-in of the same name), a removed file is unloaded, or replaced
// by the built-in of that name if there is one. A file that fails to load
// is logged and retried only when it changes again; the previous version
// keeps serving. The first scan runs before Watch returns. stop ends the
// polling and waits for it.
func (r *Registry) Watch(ctx context.Context, dir string, interval time.Duration) (stop func()) {
	if interval <= 0 {
		interval = time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	seen := map[string]fileStamp{}
	r.scan(ctx, dir, seen)
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
				r.scan(ctx, dir, seen)
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

func (r *Registry) scan(ctx context.Context, dir string, seen map[string]fileStamp) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		r.log.Warn("sampler folder unreadable", "dir", dir, "err", err)
		return
	}
	now := map[string]fileStamp{}
	for _, de := range entries {
		name, ok := strings.CutSuffix(de.Name(), ".wasm")
		if !ok || de.IsDir() {
			continue
		}
		info, err := de.Info()
		if err != nil {
			continue
		}
		st := fileStamp{info.ModTime(), info.Size()}
		now[name] = st
		if prev, ok := seen[name]; ok && prev == st {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if err != nil {
			r.log.Warn("sampler file unreadable", "file", de.Name(), "err", err)
			continue
		}
		if err := r.Swap(ctx, name, b, SourceFolder); err != nil {
			r.log.Error("sampler file refused; the previous version keeps serving", "file", de.Name(), "err", err)
		}
	}
	for name := range seen {
		if _, ok := now[name]; ok {
			continue
		}
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
	clear(seen)
	for k, v := range now {
		seen[k] = v
	}
}
