package gguf

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// The metadata keys of llama.cpp's gguf-split format. Every shard holds all
// three; the first shard also holds the model's metadata.
const (
	SplitNoKey      = "split.no"            // UINT16, this shard's index from 0
	SplitCountKey   = "split.count"         // UINT16, how many shards
	SplitTensorsKey = "split.tensors.count" // INT32, tensors in all shards together

	// MaxSplitCount is the most shards the name's %05d can number.
	MaxSplitCount = 99999
)

// splitName is llama.cpp's shard file name (llama_split_path):
// PREFIX-%05d-of-%05d.gguf, numbered from 1.
var splitName = regexp.MustCompile(`^(.*)-(\d{5})-of-(\d{5})\.gguf$`)

// SplitName is the path of shard no (counted from 0) of count shards, as
// llama.cpp's gguf-split names it: PREFIX-00001-of-00003.gguf for no 0.
func SplitName(prefix string, no, count int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, no+1, count)
}

// ParseSplitName reads a shard path: its prefix, its index counted from 0
// and the shard count. ok is false for a path not named as a shard, or one
// whose numbers are impossible (shard 0, or above the count).
func ParseSplitName(path string) (prefix string, no, count int, ok bool) {
	m := splitName.FindStringSubmatch(path)
	if m == nil {
		return "", 0, 0, false
	}
	n, _ := strconv.Atoi(m[2])
	c, _ := strconv.Atoi(m[3])
	if n < 1 || c < 1 || n > c {
		return "", 0, 0, false
	}
	return m[1], n - 1, c, true
}

// SplitError reports a split model whose shards are missing or disagree.
// No is the shard's index from 0 (-1 when the problem is the whole set).
type SplitError struct {
	Path    string // the shard's path, or the first shard's
	No      int
	Count   int
	Problem string
}

func (e *SplitError) Error() string {
	if e.No < 0 {
		return fmt.Sprintf("gguf: split model %s: %s", e.Path, e.Problem)
	}
	return fmt.Sprintf("gguf: split model shard %d of %d (%s): %s", e.No+1, e.Count, e.Path, e.Problem)
}

// OpenModel opens a GGUF model: one file, or every shard of a split model
// given the path of any of its shards (named as llama.cpp's gguf-split
// names them, PREFIX-00001-of-00003.gguf). A split model is returned as
// one File: the first shard's metadata, every shard's tensors (each read
// from its own shard's mapping, see TensorInfo.Shard), and TensorFile
// naming the shard's open file. It checks that every shard is present and
// parses, that split.no and split.count agree with the names, that tensor
// names are unique across shards and that split.tensors.count is the
// total; each failure names the shard. Close unmaps and closes every shard.
//
// A file not named as a shard whose split.count is above 1 is refused: its
// siblings cannot be found.
func OpenModel(path string) (*File, error) {
	prefix, _, count, named := ParseSplitName(path)
	if !named {
		f, err := openOwned(path)
		if err != nil {
			return nil, err
		}
		if n, no, ok := splitKeys(f); ok && n > 1 {
			f.Close()
			return nil, &SplitError{Path: path, No: int(no), Count: int(n), Problem: fmt.Sprintf(
				"the file says it is one of %d shards (%s) but its name lacks llama.cpp's -%05d-of-%05d.gguf suffix, so its siblings cannot be found; name the shards PREFIX-00001-of-%05d.gguf ...",
				n, SplitCountKey, no+1, n, n)}
		}
		return f, nil
	}
	shards := make([]*File, 0, count)
	fail := func(err error) (*File, error) {
		for _, s := range shards {
			s.Close()
		}
		return nil, err
	}
	for i := 0; i < count; i++ {
		p := SplitName(prefix, i, count)
		s, err := openOwned(p)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				err = &SplitError{Path: p, No: i, Count: count, Problem: "missing (every shard must lie beside the others)"}
			} else {
				err = &SplitError{Path: p, No: i, Count: count, Problem: err.Error()}
			}
			return fail(err)
		}
		shards = append(shards, s)
		n, no, ok := splitKeys(s)
		switch {
		case !ok && count == 1:
			// A single file that happens to be named as one shard of one.
		case !ok:
			return fail(&SplitError{Path: p, No: i, Count: count, Problem: fmt.Sprintf("%s or %s is missing or not a non-negative integer: not a gguf-split shard", SplitNoKey, SplitCountKey)})
		case n != uint64(count):
			return fail(&SplitError{Path: p, No: i, Count: count, Problem: fmt.Sprintf("%s is %d but the file names count %d shards", SplitCountKey, n, count)})
		case no != uint64(i):
			return fail(&SplitError{Path: p, No: i, Count: count, Problem: fmt.Sprintf("%s is %d but the file is named as shard %d (from 0)", SplitNoKey, no, i)})
		}
	}
	if count == 1 {
		return shards[0], nil
	}
	return merge(shards)
}

// merge joins checked shards into one File.
func merge(shards []*File) (*File, error) {
	first := shards[0]
	m := &File{
		Path: first.Path, Version: first.Version, KVs: first.KVs, Alignment: first.Alignment,
		DataOffset: first.DataOffset, Shards: shards, kvIndex: first.kvIndex,
		tensorIndex: map[string]int{},
	}
	fail := func(err error) (*File, error) {
		m.Close()
		return nil, err
	}
	count := len(shards)
	for i, s := range shards {
		for _, t := range s.Tensors {
			if j, dup := m.tensorIndex[t.Name]; dup {
				return fail(&SplitError{Path: s.Path, No: i, Count: count, Problem: fmt.Sprintf("tensor %q is also in shard %d (%s); tensor names must be unique across shards", t.Name, m.Tensors[j].Shard+1, shards[m.Tensors[j].Shard].Path)})
			}
			t.Shard = i
			m.tensorIndex[t.Name] = len(m.Tensors)
			m.Tensors = append(m.Tensors, t)
		}
	}
	for i, s := range shards {
		v, ok := s.Get(SplitTensorsKey)
		if !ok {
			continue
		}
		if n, ok := v.Int(); !ok || n != int64(len(m.Tensors)) {
			return fail(&SplitError{Path: s.Path, No: i, Count: count, Problem: fmt.Sprintf("%s is %d but the %d shards hold %d tensors", SplitTensorsKey, n, count, len(m.Tensors))})
		}
	}
	return m, nil
}

// splitKeys reads split.count and split.no; ok is false when either is
// absent or not a non-negative integer.
func splitKeys(f *File) (count, no uint64, ok bool) {
	cv, ok1 := f.Get(SplitCountKey)
	nv, ok2 := f.Get(SplitNoKey)
	if !ok1 || !ok2 {
		return 0, 0, false
	}
	count, ok1 = cv.Uint()
	no, ok2 = nv.Uint()
	return count, no, ok1 && ok2
}

// openOwned opens and maps path, keeping the file open (for TensorFile)
// until Close.
func openOwned(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	f, err := Map(fd)
	if err != nil {
		fd.Close()
		return nil, err
	}
	f.ownFD = true
	return f, nil
}

// SplitLimits bounds each shard WriteSplit writes: at most MaxTensors
// tensors and MaxBytes bytes of tensor data (each tensor counted padded to
// the alignment); 0 means no bound. A tensor larger than MaxBytes gets a
// shard of its own. This is how llama.cpp's gguf-split --split-max-tensors
// and --split-max-size group tensors.
type SplitLimits struct {
	MaxTensors int
	MaxBytes   int64
}

// Validate checks the limits' ranges.
func (l SplitLimits) Validate() error {
	switch {
	case l.MaxTensors < 0:
		return fmt.Errorf("gguf: split: MaxTensors %d is negative (0 means no bound)", l.MaxTensors)
	case l.MaxBytes < 0:
		return fmt.Errorf("gguf: split: MaxBytes %d is negative (0 means no bound)", l.MaxBytes)
	}
	return nil
}

// SplitTensors groups tensors, in order, into shards within lim.
func SplitTensors(tensors []TensorSpec, alignment uint64, lim SplitLimits) [][]TensorSpec {
	if alignment == 0 {
		alignment = DefaultAlignment
	}
	var out [][]TensorSpec
	var cur []TensorSpec
	var bytes uint64
	for _, t := range tensors {
		size := alignUp(uint64(len(t.Data)), alignment)
		full := len(cur) > 0 && ((lim.MaxTensors > 0 && len(cur) >= lim.MaxTensors) ||
			(lim.MaxBytes > 0 && bytes+size > uint64(lim.MaxBytes)))
		if full {
			out = append(out, cur)
			cur, bytes = nil, 0
		}
		cur = append(cur, t)
		bytes += size
	}
	if len(cur) > 0 || len(out) == 0 {
		out = append(out, cur)
	}
	return out
}

// WriteSplit writes a model as gguf-split shards PREFIX-00001-of-0000N.gguf
// ...: the first holds kvs (any split.* keys in them replaced), every shard
// holds split.no, split.count and split.tensors.count and its share of the
// tensors, grouped by lim. Each shard is written to a temporary file and
// renamed into place; on error none is left. It returns the shard paths.
func WriteSplit(prefix string, kvs []KV, tensors []TensorSpec, alignment uint64, lim SplitLimits) ([]string, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	if len(tensors) > math.MaxInt32 {
		return nil, fmt.Errorf("gguf: split: %d tensors exceed %s's INT32", len(tensors), SplitTensorsKey)
	}
	groups := SplitTensors(tensors, alignment, lim)
	if len(groups) > MaxSplitCount {
		return nil, fmt.Errorf("gguf: split: %d shards exceed the %d a shard name can number; raise the limits", len(groups), MaxSplitCount)
	}
	meta := make([]KV, 0, len(kvs)+3)
	for _, kv := range kvs {
		if kv.Key != SplitNoKey && kv.Key != SplitCountKey && kv.Key != SplitTensorsKey {
			meta = append(meta, kv)
		}
	}
	var paths []string
	cleanup := func() {
		for _, p := range paths {
			os.Remove(p)
		}
	}
	for i, g := range groups {
		keys := []KV{
			{Key: SplitNoKey, Value: NewUint16(uint16(i))},
			{Key: SplitCountKey, Value: NewUint16(uint16(len(groups)))},
			{Key: SplitTensorsKey, Value: NewInt32(int32(len(tensors)))},
		}
		if i == 0 {
			keys = append(meta[:len(meta):len(meta)], keys...)
		}
		p := SplitName(prefix, i, len(groups))
		if err := writeFile(p, keys, g, alignment); err != nil {
			cleanup()
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// writeFile writes one GGUF file through a temporary file and a rename.
func writeFile(path string, kvs []KV, tensors []TensorSpec, alignment uint64) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	err = Write(f, kvs, tensors, alignment)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("gguf: %w", cerr)
	}
	if err == nil {
		if err = os.Rename(tmp, path); err != nil {
			err = fmt.Errorf("gguf: %w", err)
		}
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// SplitFile rewrites the GGUF model at src (one file or a split model) as
// shards PREFIX-00001-of-0000N.gguf within lim, copying its metadata and
// tensor bytes unchanged, as llama.cpp's gguf-split --split does.
func SplitFile(src, prefix string, lim SplitLimits) ([]string, error) {
	f, err := OpenModel(src)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ts := make([]TensorSpec, len(f.Tensors))
	for i, t := range f.Tensors {
		_, data, err := f.Tensor(t.Name)
		if err != nil {
			return nil, err
		}
		ts[i] = TensorSpec{Name: t.Name, Dims: t.Dims, Type: t.Type, Data: data}
	}
	return WriteSplit(prefix, f.KVs, ts, f.Alignment, lim)
}

// BaseName is a model's name from its path when its metadata has none: the
// file name without its extension and, for a shard, without the
// -00001-of-00003 suffix, so every shard names the same model.
func BaseName(path string) string {
	if prefix, _, _, ok := ParseSplitName(path); ok {
		path = prefix + ".gguf"
	}
	base := filepath.Base(path)
	return strings.TrimSuffix(base, filepath.Ext(base))
}
