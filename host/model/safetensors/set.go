package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// IndexFileName is the conventional name of a sharded checkpoint's index.
const IndexFileName = "model.safetensors.index.json"

// maxIndexSize bounds the index JSON (real ones are well under 1 MB).
const maxIndexSize = 64 << 20

// Set is a group of safetensors files (the shards of one checkpoint) that
// resolves tensor names across them. Each file is opened once.
type Set struct {
	Files  []*File // sorted by path
	byName map[string]*File
}

// OpenFiles opens each path and builds a Set; a tensor name in more than
// one file is an error.
func OpenFiles(paths []string) (*Set, error) {
	s := &Set{byName: map[string]*File{}}
	sorted := append([]string(nil), paths...)
	sort.Strings(sorted)
	for _, p := range sorted {
		if len(s.Files) > 0 && s.Files[len(s.Files)-1].Path == p {
			continue
		}
		f, err := Open(p)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.Files = append(s.Files, f)
		for _, t := range f.Tensors {
			if other, dup := s.byName[t.Name]; dup {
				s.Close()
				return nil, fmt.Errorf("safetensors: tensor %q is in both %s and %s", t.Name, other.Path, f.Path)
			}
			s.byName[t.Name] = f
		}
	}
	return s, nil
}

// Index is the content of a model.safetensors.index.json.
type Index struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// ReadIndex reads and checks an index file: the weight map must be
// non-empty and name shards as plain file names (no directories), since
// the index is untrusted.
func ReadIndex(path string) (*Index, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer fd.Close()
	b, err := io.ReadAll(io.LimitReader(fd, maxIndexSize+1))
	if err != nil {
		return nil, fmt.Errorf("safetensors: read %s: %w", path, err)
	}
	if len(b) > maxIndexSize {
		return nil, &FormatError{File: path, Field: "index", Problem: fmt.Sprintf("larger than %d bytes", maxIndexSize)}
	}
	var idx Index
	if err := json.Unmarshal(b, &idx); err != nil {
		var se *json.SyntaxError
		off := int64(0)
		if errors.As(err, &se) {
			off = se.Offset
		}
		return nil, &FormatError{File: path, Field: "index", Offset: off, Problem: err.Error()}
	}
	if len(idx.WeightMap) == 0 {
		return nil, &FormatError{File: path, Field: "weight_map", Problem: "missing or empty"}
	}
	for name, shard := range idx.WeightMap {
		if !plainFileName(shard) {
			return nil, &FormatError{File: path, Field: fmt.Sprintf("weight_map[%q]", name), Problem: fmt.Sprintf("shard %q is not a plain file name", shard)}
		}
	}
	return &idx, nil
}

func plainFileName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, `/\`+"\x00") && filepath.Base(s) == s
}

// OpenIndex opens a sharded checkpoint. path is the index file, or a
// directory holding IndexFileName. Every shard named in the weight map is
// opened once; each mapped tensor must be in the shard the map names.
// Tensors that shards hold but the map omits are still resolvable.
func OpenIndex(path string) (*Set, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, IndexFileName)
	}
	idx, err := ReadIndex(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	var shards []string
	seen := map[string]bool{}
	for _, shard := range idx.WeightMap {
		if !seen[shard] {
			seen[shard] = true
			shards = append(shards, filepath.Join(dir, shard))
		}
	}
	s, err := OpenFiles(shards)
	if err != nil {
		return nil, err
	}
	for name, shard := range idx.WeightMap {
		f := s.byName[name]
		if f == nil || filepath.Base(f.Path) != shard {
			s.Close()
			return nil, &FormatError{File: path, Field: fmt.Sprintf("weight_map[%q]", name), Problem: fmt.Sprintf("tensor is not in shard %s", shard)}
		}
	}
	return s, nil
}

// Names lists every tensor name, sorted.
func (s *Set) Names() []string {
	names := make([]string, 0, len(s.byName))
	for n := range s.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Info returns the named tensor's description.
func (s *Set) Info(name string) (TensorInfo, bool) {
	f := s.byName[name]
	if f == nil {
		return TensorInfo{}, false
	}
	return f.Info(name)
}

// Tensor returns the named tensor's info and bytes from whichever shard
// holds it; the bytes are valid until Close.
func (s *Set) Tensor(name string) (TensorInfo, []byte, error) {
	f := s.byName[name]
	if f == nil {
		return TensorInfo{}, nil, fmt.Errorf("safetensors: no tensor %q in %d files", name, len(s.Files))
	}
	return f.Tensor(name)
}

// Close closes every file and returns the first error.
func (s *Set) Close() error {
	var first error
	for _, f := range s.Files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
