package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/hf"
	"github.com/kvhost/kvhost/host/model/safetensors"
)

// HFExport configures ExportHF.
type HFExport struct {
	// ShardBytes caps the tensor data of one safetensors file: a larger
	// checkpoint is sharded as transformers shards it
	// (model-0000i-of-0000n.safetensors and model.safetensors.index.json).
	// 0 means DefaultHFShardBytes.
	ShardBytes int64
}

// DefaultHFShardBytes is ExportHF's shard size when HFExport gives none.
const DefaultHFShardBytes = 2 << 30

// ExportHF writes the GGUF model at src as the Hugging Face checkpoint
// llama.cpp's converter would have made it from (the inverse of
// convert_hf_to_gguf.py, and of what LoadHF undoes): config.json with the
// architecture's own field names, the weights in safetensors under their HF
// names and layouts, tokenizer.json, tokenizer_config.json (with the chat
// template) and generation_config.json. The layout facts live beside the
// loader's (hfexport_tensors.go: each one is the inverse of a read in
// load_hf.go and the arch_*load.go files, by the same name tables).
//
// Tensors keep their stored type (F32, F16, BF16; gpt-oss's MXFP4 experts
// as HF's *_blocks/*_scales); other quantized types are refused. The
// tokenizer must be byte-level BPE (tokenizer.ggml.model "gpt2"), the only
// tokenizer.json kind kvhost reads. The written config.json is read back
// and must give src's configuration, so what cannot be expressed in HF's
// fields is an error, not a silently different model.
//
// dir must not exist or be empty; it is written through a sibling
// temporary directory and renamed into place.
func ExportHF(src, dir string, o HFExport) error {
	if o.ShardBytes < 0 {
		return fmt.Errorf("model: export hf: shard size %d must be positive (0: %d)", o.ShardBytes, DefaultHFShardBytes)
	}
	if o.ShardBytes == 0 {
		o.ShardBytes = DefaultHFShardBytes
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return fmt.Errorf("model: export hf: %s exists and is not empty", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("model: export hf: %w", err)
	}
	f, err := gguf.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	c, err := ConfigFromGGUF(f)
	if err != nil {
		return err
	}
	x := &hfExporter{f: f, c: c}
	files := map[string][]byte{}
	tok, tokCfg, err := hfTokenizerFiles(f)
	if err != nil {
		return err
	}
	files[hf.TokenizerFile], files[hf.TokenizerConfigFile] = tok, tokCfg
	cfg, gen, err := x.configFiles()
	if err != nil {
		return err
	}
	files[hf.ConfigFile], files["generation_config.json"] = cfg, gen

	tmp := filepath.Clean(dir) + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("model: export hf: %w", err)
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return fmt.Errorf("model: export hf: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	w := &shardWriter{dir: tmp, limit: o.ShardBytes}
	for _, ti := range f.Tensors {
		out, err := x.tensor(ti)
		if err != nil {
			return fmt.Errorf("model: export hf: %s: tensor %s: %w", src, ti.Name, err)
		}
		for _, t := range out {
			if err := w.add(t); err != nil {
				return err
			}
		}
	}
	if err := w.finish(); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(tmp, name), data, 0o644); err != nil {
			return fmt.Errorf("model: export hf: %w", err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("model: export hf: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("model: export hf: %w", err)
	}
	ok = true
	return nil
}

// shardWriter packs tensors into safetensors files of at most limit bytes
// of data (a larger tensor gets a file of its own), named
// model-0000i.part until the count is known.
type shardWriter struct {
	dir     string
	limit   int64
	pending []safetensors.Tensor
	size    int64
	shards  [][]string // tensor names per shard
	total   int64
}

func (w *shardWriter) add(t safetensors.Tensor) error {
	n := int64(len(t.Data))
	if len(w.pending) > 0 && w.size+n > w.limit {
		if err := w.flush(); err != nil {
			return err
		}
	}
	w.pending = append(w.pending, t)
	w.size += n
	w.total += n
	return nil
}

func (w *shardWriter) part(i int) string {
	return filepath.Join(w.dir, fmt.Sprintf("model-%05d.part", i+1))
}

func (w *shardWriter) flush() error {
	var buf bytes.Buffer
	if err := safetensors.Write(&buf, w.pending, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("model: export hf: %w", err)
	}
	names := make([]string, len(w.pending))
	for i, t := range w.pending {
		names[i] = t.Name
	}
	if err := os.WriteFile(w.part(len(w.shards)), buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("model: export hf: %w", err)
	}
	w.shards = append(w.shards, names)
	w.pending, w.size = nil, 0
	return nil
}

// finish writes the last shard and names them: model.safetensors when
// there is one, else model-0000i-of-0000n.safetensors with the index
// transformers writes (metadata.total_size, weight_map).
func (w *shardWriter) finish() error {
	if len(w.pending) > 0 || len(w.shards) == 0 {
		if err := w.flush(); err != nil {
			return err
		}
	}
	if len(w.shards) == 1 {
		return os.Rename(w.part(0), filepath.Join(w.dir, hf.SingleWeightsFile))
	}
	weights := map[string]string{}
	for i, names := range w.shards {
		file := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(w.shards))
		if err := os.Rename(w.part(i), filepath.Join(w.dir, file)); err != nil {
			return fmt.Errorf("model: export hf: %w", err)
		}
		for _, n := range names {
			weights[n] = file
		}
	}
	idx, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": w.total}, "weight_map": weights}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(w.dir, safetensors.IndexFileName), idx, 0o644)
}

// hfExporter converts one GGUF file's tensors.
type hfExporter struct {
	f *gguf.File
	c Config
}

// stDType is the safetensors type of a GGUF tensor type kept as stored.
var stDType = map[gguf.TensorType]safetensors.DType{
	gguf.TypeF32: safetensors.F32, gguf.TypeF16: safetensors.F16, gguf.TypeBF16: safetensors.BF16,
}

// read returns a tensor's info, bytes and safetensors type (refusing the
// quantized types HF checkpoints do not hold).
func (x *hfExporter) read(name string) (gguf.TensorInfo, []byte, safetensors.DType, error) {
	ti, raw, err := x.f.Tensor(name)
	if err != nil {
		return ti, nil, "", err
	}
	dt, ok := stDType[ti.Type]
	if !ok {
		return ti, nil, "", fmt.Errorf("type %s: a Hugging Face checkpoint holds F32, F16 or BF16 tensors (and gpt-oss's MXFP4 experts); write the model as f32, f16 or bf16", ti.Type)
	}
	return ti, raw, dt, nil
}

// hfShape is a GGUF tensor's safetensors shape: the dims reversed (the row
// length last).
func hfShape(dims []uint64) []uint64 {
	out := make([]uint64, len(dims))
	for i, d := range dims {
		out[len(out)-1-i] = d
	}
	return out
}

// floatsOf reads F32 tensor bytes (floatBytes, arch_deepseek.go, writes them).
func floatsOf(raw []byte) []float32 {
	v := make([]float32, len(raw)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return v
}

// layerPart splits blk.N.part into N and part ("" for a global tensor).
func layerPart(canon string) (layer, part string) {
	rest, ok := strings.CutPrefix(canon, "blk.")
	if !ok {
		return "", ""
	}
	layer, part, _ = strings.Cut(rest, ".")
	return layer, part
}
