package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/kvhost/kvhost/host/model/safetensors"
)

// File names inside a model directory.
const (
	ConfigFile          = "config.json"
	TokenizerFile       = "tokenizer.json"
	TokenizerConfigFile = "tokenizer_config.json"
	ChatTemplateFile    = "chat_template.jinja"
	SingleWeightsFile   = "model.safetensors"
)

// Size caps for the files read whole. Real files are far smaller (a Llama 3
// tokenizer.json is about 9 MB).
const (
	maxConfigSize    = 16 << 20
	maxTokenizerSize = 512 << 20
)

// ErrNoWeights means the directory has neither an index nor model.safetensors.
var ErrNoWeights = errors.New("hf: no model.safetensors or model.safetensors.index.json")

// Model is a Hugging Face model directory, read but with weights not yet
// mapped.
type Model struct {
	Dir        string
	ConfigJSON []byte // raw config.json
	Config     Config

	// WeightFiles are the safetensors paths, sorted; IndexPath is the
	// index file when the checkpoint is sharded, else "".
	WeightFiles []string
	IndexPath   string

	// TokenizerJSON and TokenizerConfigJSON are the raw files, nil when absent.
	TokenizerJSON       []byte
	TokenizerConfigJSON []byte
	// ChatTemplate is tokenizer_config.json's chat_template (the "default"
	// entry, or the first, when it is a list), else chat_template.jinja,
	// else "".
	ChatTemplate string
}

// Open reads dir: config.json (required), the weight file list (required),
// and the tokenizer files (optional).
func Open(dir string) (*Model, error) {
	m := &Model{Dir: dir}
	var err error
	if m.ConfigJSON, err = readCapped(filepath.Join(dir, ConfigFile), maxConfigSize); err != nil {
		return nil, err
	}
	if m.Config, err = ParseConfig(m.ConfigJSON); err != nil {
		return nil, fmt.Errorf("hf: %s: %w", dir, err)
	}
	if err := m.findWeights(); err != nil {
		return nil, err
	}
	if m.TokenizerJSON, err = readOptional(filepath.Join(dir, TokenizerFile), maxTokenizerSize); err != nil {
		return nil, err
	}
	if m.TokenizerConfigJSON, err = readOptional(filepath.Join(dir, TokenizerConfigFile), maxTokenizerSize); err != nil {
		return nil, err
	}
	if m.TokenizerConfigJSON != nil {
		if m.ChatTemplate, err = ChatTemplate(m.TokenizerConfigJSON); err != nil {
			return nil, fmt.Errorf("hf: %s: %w", filepath.Join(dir, TokenizerConfigFile), err)
		}
	}
	if m.ChatTemplate == "" {
		t, err := readOptional(filepath.Join(dir, ChatTemplateFile), maxConfigSize)
		if err != nil {
			return nil, err
		}
		m.ChatTemplate = string(t)
	}
	return m, nil
}

func (m *Model) findWeights() error {
	index := filepath.Join(m.Dir, safetensors.IndexFileName)
	if _, err := os.Stat(index); err == nil {
		idx, err := safetensors.ReadIndex(index)
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, shard := range idx.WeightMap {
			p := filepath.Join(m.Dir, shard)
			if !seen[p] {
				seen[p] = true
				m.WeightFiles = append(m.WeightFiles, p)
			}
		}
		sort.Strings(m.WeightFiles)
		m.IndexPath = index
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("hf: %w", err)
	}
	single := filepath.Join(m.Dir, SingleWeightsFile)
	if _, err := os.Stat(single); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w in %s", ErrNoWeights, m.Dir)
		}
		return fmt.Errorf("hf: %w", err)
	}
	m.WeightFiles = []string{single}
	return nil
}

// OpenWeights maps the weight files. With an index, every mapped tensor is
// checked against its shard. The caller closes the set.
func (m *Model) OpenWeights() (*safetensors.Set, error) {
	if m.IndexPath != "" {
		return safetensors.OpenIndex(m.IndexPath)
	}
	return safetensors.OpenFiles(m.WeightFiles)
}

// ChatTemplate extracts chat_template from tokenizer_config.json bytes. It
// may be a string or a list of {name, template}; from a list it picks the
// one named "default", else the first. Absent means "".
func ChatTemplate(tokenizerConfig []byte) (string, error) {
	var tc struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(tokenizerConfig, &tc); err != nil {
		return "", fmt.Errorf("hf: tokenizer_config.json: %w", err)
	}
	raw := tc.ChatTemplate
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", fmt.Errorf("hf: tokenizer_config.json: chat_template must be a string or a list of {name, template}: %w", err)
	}
	if len(list) == 0 {
		return "", nil
	}
	for _, t := range list {
		if t.Name == "default" {
			return t.Template, nil
		}
	}
	return list[0].Template, nil
}

func readCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hf: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("hf: read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("hf: %s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// readOptional is readCapped that returns nil, nil for a missing file.
func readOptional(path string, limit int64) ([]byte, error) {
	b, err := readCapped(path, limit)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}
