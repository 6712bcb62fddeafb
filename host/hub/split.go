package hub

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kvhost/kvhost/host/model/gguf"
)

// GGUFModel is one GGUF model among a repository's or a snapshot's files:
// a single file, or a split model (llama.cpp's gguf-split shards
// PREFIX-00001-of-00003.gguf, the naming rule gguf.SplitName writes down).
type GGUFModel struct {
	// File is the model's path: the file itself, or the first shard's
	// name (what llama.cpp's -m and kvhost serve --model take).
	File string `json:"file"`
	// Shards are a split model's shards in order, File first; nil for a
	// single file.
	Shards []string `json:"shards,omitempty"`
	// Missing are the shards the split's names call for that the files
	// lack.
	Missing []string `json:"missing,omitempty"`
}

// Files are the files to fetch for the model: its shards, or itself.
func (m GGUFModel) Files() []string {
	if m.Shards == nil {
		return []string{m.File}
	}
	return m.Shards
}

// complete refuses a split model with shards missing, naming them.
func (m GGUFModel) complete(repo, where string) error {
	if len(m.Missing) == 0 {
		return nil
	}
	n := len(m.Shards) + len(m.Missing)
	return fmt.Errorf("hub: %s: %s is split in %d shards but %s lacks %s", repo, m.File, n, where, strings.Join(m.Missing, ", "))
}

// GGUFModels groups the GGUF files among files into models, sorted by
// File: each split model's shards become one entry.
func GGUFModels(files []string) []GGUFModel {
	var out []GGUFModel
	type set struct {
		prefix string
		count  int
	}
	splits := map[set][]bool{}
	for _, f := range files {
		if !strings.HasSuffix(strings.ToLower(f), ".gguf") {
			continue
		}
		prefix, no, count, ok := gguf.ParseSplitName(f)
		if !ok || count == 1 {
			out = append(out, GGUFModel{File: f})
			continue
		}
		k := set{prefix, count}
		if splits[k] == nil {
			splits[k] = make([]bool, count)
		}
		splits[k][no] = true
	}
	for k, have := range splits {
		m := GGUFModel{File: gguf.SplitName(k.prefix, 0, k.count)}
		for no, ok := range have {
			name := gguf.SplitName(k.prefix, no, k.count)
			if ok {
				m.Shards = append(m.Shards, name)
			} else {
				m.Missing = append(m.Missing, name)
			}
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b GGUFModel) int { return strings.Compare(a.File, b.File) })
	return out
}

// modelOf is the model a file belongs to among files (a shard names its
// split model); ok is false when files do not hold file.
func modelOf(files []string, file string) (GGUFModel, bool) {
	for _, m := range GGUFModels(files) {
		if m.File == file || slices.Contains(m.Shards, file) {
			return m, true
		}
	}
	return GGUFModel{}, false
}

// shardNote describes a split model's first shard in listings ("" for a
// single file).
func shardNote(file string) string {
	if _, _, count, ok := gguf.ParseSplitName(file); ok && count > 1 {
		return fmt.Sprintf(", split in %d shards", count)
	}
	return ""
}
