package plan

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/hf"
)

// LoadModel reads a model's configuration and weight sizes without loading
// weights: a config.json, a Hugging Face directory (its config.json; the
// matrices are sized from torch_dtype) or a GGUF file (header only: tensor
// sizes from the tensor infos).
func LoadModel(path string) (name string, c model.Config, ts []Tensor, err error) {
	cfgPath, err := configPath(path)
	if err != nil {
		return "", model.Config{}, nil, err
	}
	if cfgPath == "" {
		return loadGGUF(path)
	}
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return "", model.Config{}, nil, fmt.Errorf("plan: %w", err)
	}
	c, ts, err = configJSON(raw, cfgPath)
	return filepath.Base(filepath.Dir(cfgPath)), c, ts, err
}

// HFConfig is the config.json of a model served from a Hugging Face
// directory (or given as a config.json), which the KV configurator receives
// verbatim; nil for a GGUF file, whose configurator input the host writes
// (ConfigJSON).
func HFConfig(path string) (json.RawMessage, error) {
	cfgPath, err := configPath(path)
	if err != nil || cfgPath == "" {
		return nil, err
	}
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("plan: %s is not valid JSON", cfgPath)
	}
	return raw, nil
}

// configPath is the config.json a model path names: the file in a Hugging
// Face directory, the path itself when it is a .json, "" for a GGUF file.
func configPath(path string) (string, error) {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return "", fmt.Errorf("plan: %w", err)
	case st.IsDir():
		return filepath.Join(path, "config.json"), nil
	case strings.HasSuffix(path, ".json"):
		return path, nil
	}
	return "", nil
}

//go:embed models/*.json
var bundled embed.FS

// Bundled lists the model configurations embedded in the binary.
func Bundled() []string {
	ents, _ := fs.ReadDir(bundled, "models")
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			out = append(out, n)
		}
	}
	return out
}

// LoadBundled is LoadModel for an embedded configuration.
func LoadBundled(name string) (model.Config, []Tensor, error) {
	raw, err := bundled.ReadFile("models/" + name + ".json")
	if err != nil {
		return model.Config{}, nil, fmt.Errorf("plan: no bundled model %q (have %v)", name, Bundled())
	}
	return configJSON(raw, name)
}

func configJSON(raw []byte, cfgPath string) (model.Config, []Tensor, error) {
	hc, err := hf.ParseConfig(raw)
	if err != nil {
		return model.Config{}, nil, fmt.Errorf("plan: %s: %w", cfgPath, err)
	}
	c, err := model.ConfigFromHF(hc, cfgPath)
	if err != nil {
		return model.Config{}, nil, err
	}
	elem := 2.0
	if hc.TorchDType == "float32" {
		elem = 4
	}
	ts, err := WeightTensors(c, DenseMatrices(c, elem))
	return c, ts, err
}

func loadGGUF(path string) (string, model.Config, []Tensor, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return "", model.Config{}, nil, err
	}
	defer f.Close()
	c, err := model.ConfigFromGGUF(f)
	if err != nil {
		return "", model.Config{}, nil, err
	}
	sizes := map[string]int64{}
	for _, t := range f.Tensors {
		sizes[t.Name] = model.GGUFDeviceBytes(t)
	}
	ts, err := WeightTensors(c, func(n string) (int64, bool) { v, ok := sizes[n]; return v, ok })
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	if v, ok := f.Get("general.name"); ok {
		if s, ok := v.String(); ok && s != "" {
			name = s
		}
	}
	return name, c, ts, err
}
