package plugin

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// FolderEntry is one <name>.wasm of a plugins folder that can be read: a
// regular file (or a link to one) within the size cap.
type FolderEntry struct {
	Name    string // file name without .wasm
	Path    string
	ModTime time.Time
	Size    int64
}

// ScanFolder lists the plugins of dir, sorted by name. It reads nothing:
// entries that are not regular files (a directory named x.wasm, a link to
// /dev/zero or to nowhere) or that are over maxBytes are skipped and each
// reported in skipped, with the reason, for the caller to log.
func ScanFolder(dir string, maxBytes int64) (entries []FolderEntry, skipped []error, err error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("plugin: plugins folder: %w", err)
	}
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), ".wasm")
		if !ok {
			continue
		}
		path := filepath.Join(dir, de.Name())
		info, err := os.Stat(path) // follows links: what would be read
		switch {
		case err != nil:
			skipped = append(skipped, fmt.Errorf("plugin: skipping %s: %w", path, err))
		case !info.Mode().IsRegular():
			skipped = append(skipped, fmt.Errorf("plugin: skipping %s: not a regular file (%s)", path, info.Mode().Type()))
		case info.Size() > maxBytes:
			skipped = append(skipped, fmt.Errorf("plugin: skipping %s: %d bytes, over the %d-byte plugin size cap", path, info.Size(), maxBytes))
		default:
			entries = append(entries, FolderEntry{Name: name, Path: path, ModTime: info.ModTime(), Size: info.Size()})
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	return entries, skipped, nil
}

// ReadPluginFile reads a plugin file of at most maxBytes, checking again on
// the open file that it is a regular file (it may have been replaced since
// it was listed) and never reading past the cap.
func ReadPluginFile(path string, maxBytes int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("plugin: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("plugin: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("plugin: %s: not a regular file (%s)", path, info.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("plugin: %s: %w", path, err)
	}
	if int64(len(b)) > maxBytes {
		return nil, fmt.Errorf("plugin: %s: over the %d-byte plugin size cap", path, maxBytes)
	}
	return b, nil
}
