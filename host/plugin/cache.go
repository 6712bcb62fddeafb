package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kvhost/kvhost/host/plugin/fuel"
)

// metaDir is the folder, beside wazero's compilation cache, holding one
// record per accepted module.
const metaDir = "kvhost-plugins"

// record is what loading one module (by the sha256 of its bytes) found:
// written when Describe has validated it and read its descriptor, and
// again when a load accepted it. A refused module leaves no compiled code
// behind; its record (if Describe wrote one) holds no more than its
// descriptor. Records are trusted as the compilation cache is (the
// embedder guards the directory).
type record struct {
	// Features and Wazero say under what the original was validated; a
	// record from another wazero version or feature set is ignored.
	Features uint64 `json:"features"`
	Wazero   string `json:"wazero"`
	// Kind and Descriptor are the handshake's answer: a registry decides
	// which configurator claims a model from these without compiling the
	// others.
	Kind       string          `json:"kind"`
	Descriptor json.RawMessage `json:"descriptor"`
	// Accepted: a load accepted it (its handshake, checks and, for a
	// sampler, self-test passed). SelfTested: it passed its kind's
	// self-test.
	Accepted   bool `json:"accepted"`
	SelfTested bool `json:"self_tested"`
	// Files are the compiled-code files its compile wrote (names in the
	// wazero version directory), touched when used and evicted by age.
	Files []string `json:"files,omitempty"`
}

// diskCache manages CacheDir: wazero's compiled code (one directory per
// wazero version) and the records. Its methods are safe for concurrent
// use; several processes may share the directory (the worst a race can do
// is evict a file another one would have reused).
type diskCache struct {
	dir      string
	maxBytes int64
	log      *slog.Logger
}

func newDiskCache(dir string, maxBytes int64, log *slog.Logger) (*diskCache, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(abs, metaDir), 0o755); err != nil {
		return nil, fmt.Errorf("plugin: cache %s: %w", abs, err)
	}
	return &diskCache{dir: abs, maxBytes: maxBytes, log: log}, nil
}

// codeDir is wazero's directory for this build, which
// NewCompilationCacheWithDir names wazero-<version>-<arch>-<os>.
func (c *diskCache) codeDir() string {
	return filepath.Join(c.dir, "wazero-"+wazeroVersion()+"-"+runtime.GOARCH+"-"+runtime.GOOS)
}

// files lists the compiled-code files now present.
func (c *diskCache) files() map[string]bool {
	out := map[string]bool{}
	entries, _ := os.ReadDir(c.codeDir())
	for _, e := range entries {
		if !e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
			out[e.Name()] = true
		}
	}
	return out
}

// added returns the files in after that were not in before.
func added(before, after map[string]bool) []string {
	var out []string
	for f := range after {
		if !before[f] {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// remove deletes compiled-code files (of a refused or abandoned module).
func (c *diskCache) remove(files []string) {
	dir := c.codeDir()
	for _, f := range files {
		if err := os.Remove(filepath.Join(dir, filepath.Base(f))); err != nil && !os.IsNotExist(err) {
			c.log.Warn("plugin cache: removing a refused module's compiled code", "file", f, "err", err)
		}
	}
}

func (c *diskCache) recordPath(sum string) string { return filepath.Join(c.dir, metaDir, sum+".json") }

// get returns the record of a module, if one was written by this wazero
// version for this feature set.
func (c *diskCache) get(sum string) (record, bool) {
	b, err := os.ReadFile(c.recordPath(sum))
	if err != nil {
		return record{}, false
	}
	var r record
	if json.Unmarshal(b, &r) != nil || r.Features != uint64(fuel.CoreFeatures) || r.Wazero != wazeroVersion() {
		return record{}, false
	}
	return r, true
}

// put writes a record atomically (temp file, rename).
func (c *diskCache) put(sum string, r record) {
	r.Features, r.Wazero = uint64(fuel.CoreFeatures), wazeroVersion()
	b, err := json.Marshal(r)
	if err == nil {
		var f *os.File
		if f, err = os.CreateTemp(filepath.Join(c.dir, metaDir), sum+".*.tmp"); err == nil {
			_, err = f.Write(b)
			err = errors.Join(err, f.Close())
			if err == nil {
				err = os.Rename(f.Name(), c.recordPath(sum))
			}
			if err != nil {
				_ = os.Remove(f.Name())
			}
		}
	}
	if err != nil {
		c.log.Warn("plugin cache: writing a module record", "sha256", sum, "err", err)
	}
}

// touch marks a module's compiled code as used now (eviction is by age).
func (c *diskCache) touch(files []string) {
	dir := c.codeDir()
	now := time.Now()
	for _, f := range files {
		_ = os.Chtimes(filepath.Join(dir, filepath.Base(f)), now, now)
	}
}

// evict deletes compiled code, least recently used first, until the
// cache holds at most maxBytes. It considers every wazero version's
// directory (an older version's files are never used again, so they age
// out first) and never touches a file being written (*.tmp): other
// processes may share the directory.
func (c *diskCache) evict() {
	type file struct {
		path string
		size int64
		mod  time.Time
	}
	var files []file
	var total int64
	matches, _ := filepath.Glob(filepath.Join(c.dir, "wazero-*"))
	for _, dir := range matches {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
				continue
			}
			if info, err := e.Info(); err == nil {
				files = append(files, file{filepath.Join(dir, e.Name()), info.Size(), info.ModTime()})
				total += info.Size()
			}
		}
	}
	if total <= c.maxBytes {
		return
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mod.Before(files[j].mod) })
	for _, f := range files {
		if total <= c.maxBytes {
			break
		}
		if os.Remove(f.path) == nil {
			total -= f.size
			c.log.Info("plugin cache: evicted compiled code", "file", filepath.Base(f.path), "bytes", f.size, "cache_bytes", total, "limit", c.maxBytes)
		}
	}
}

// wazeroVersion is the version wazero names its cache directory by (as
// its internal/version does: the module's version in the build info, else
// the main module's, else "dev"); records are keyed by it too.
func wazeroVersion() string {
	wazeroVersionOnce.Do(func() {
		v := ""
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, d := range bi.Deps {
				if strings.Contains(d.Path, "github.com/tetratelabs/wazero") {
					v = d.Version
				}
			}
			if v == "" || v == "(devel)" {
				v = bi.Main.Version
			}
		}
		if v == "" || v == "(devel)" {
			v = "dev"
		}
		wazeroVersionName = v
	})
	return wazeroVersionName
}

var (
	wazeroVersionOnce sync.Once
	wazeroVersionName string
)
