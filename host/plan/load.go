package plan

import (
	"embed"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
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
	c, err := model.ConfigFromHF(raw, cfgPath)
	if err != nil {
		return model.Config{}, nil, err
	}
	elem := 2.0
	if hc.TorchDType == "float32" {
		elem = 4
	}
	var q struct {
		Q struct {
			Method string `json:"quant_method"`
		} `json:"quantization_config"`
	}
	_ = json.Unmarshal(raw, &q) // valid JSON: ParseConfig read it; a malformed entry is no quantization
	dense := DenseMatrices(elem)
	ts, err := WeightTensors(c, func(t model.TensorShape) (int64, bool) {
		if n, ok := model.HFQuantizedBytes(c, q.Q.Method, t); ok {
			return n, true
		}
		return dense(t)
	})
	return c, ts, err
}

func loadGGUF(path string) (string, model.Config, []Tensor, error) {
	f, err := gguf.OpenModel(path) // one file, or a split model's shards
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
	ts, err := WeightTensors(c, func(t model.TensorShape) (int64, bool) { v, ok := sizes[t.Name]; return v, ok })
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	if v, ok := f.Get("general.name"); ok {
		if s, ok := v.String(); ok && s != "" {
			name = s
		}
	}
	gn, _ := f.Get("general.name")
	if s, _ := gn.String(); s == "" {
		name = gguf.BaseName(path) // without general.name, a shard names its split model
	}
	return name, c, ts, err
}

// LoadGPUModel reads what a GPU plan needs without loading weights: the
// config.json bytes the configurator reads (a GGUF header is turned into
// its Hugging Face equivalent) and, when the files say so exactly, the
// weights' total size — a safetensors index's metadata.total_size, the
// data of *.safetensors files, a GGUF file's tensors as the device holds
// them. weightBytes is 0 when only a config.json is at hand; the plan then
// estimates the weights from the shapes (HFModel).
func LoadGPUModel(path string) (name string, raw json.RawMessage, weightBytes int64, source string, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", nil, 0, "", fmt.Errorf("plan: %w", err)
	}
	if !st.IsDir() && !strings.HasSuffix(path, ".json") {
		name, c, ts, err := loadGGUF(path)
		if err != nil {
			return "", nil, 0, "", err
		}
		raw, err := ConfigJSON(c)
		_, dev := WeightCost(ts, 1)
		return name, raw, dev, "GGUF tensors as the device holds them", err
	}
	cfgPath, dir := path, filepath.Dir(path)
	if st.IsDir() {
		cfgPath, dir = filepath.Join(path, "config.json"), path
	}
	if raw, err = os.ReadFile(cfgPath); err != nil {
		return "", nil, 0, "", fmt.Errorf("plan: %w", err)
	}
	name = filepath.Base(dir)
	if !st.IsDir() {
		if b := strings.TrimSuffix(filepath.Base(path), ".json"); b != "config" {
			name = b
		}
		return name, raw, 0, "", nil
	}
	weightBytes, source, err = safetensorsBytes(dir)
	return name, raw, weightBytes, source, err
}

// safetensorsBytes is the tensor data of a Hugging Face directory: the
// index's total_size, else the data sections of its .safetensors files (a
// file is an 8-byte little-endian header length, the JSON header, then the
// data). 0 when the directory holds neither.
func safetensorsBytes(dir string) (int64, string, error) {
	if b, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json")); err == nil {
		var idx struct {
			Metadata struct {
				TotalSize int64 `json:"total_size"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(b, &idx); err != nil || idx.Metadata.TotalSize <= 0 {
			return 0, "", fmt.Errorf("plan: %s: no metadata.total_size (%v)", filepath.Join(dir, "model.safetensors.index.json"), err)
		}
		return idx.Metadata.TotalSize, "model.safetensors.index.json total_size", nil
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	var total int64
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return 0, "", fmt.Errorf("plan: %w", err)
		}
		var hdr [8]byte
		_, err = io.ReadFull(f, hdr[:])
		st, serr := f.Stat()
		f.Close()
		if err != nil || serr != nil {
			return 0, "", fmt.Errorf("plan: %s: not a safetensors file", p)
		}
		n := int64(binary.LittleEndian.Uint64(hdr[:]))
		if n < 0 || 8+n > st.Size() {
			return 0, "", fmt.Errorf("plan: %s: header length %d exceeds the file's %d bytes", p, n, st.Size())
		}
		total += st.Size() - 8 - n
	}
	if total == 0 {
		return 0, "", nil
	}
	return total, fmt.Sprintf("data of %d .safetensors files", len(files)), nil
}
