package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/tokenizer"
)

type ggufMeta struct {
	f    *gguf.File
	arch string
}

func (g ggufMeta) int(key string, def int, required bool) (int, error) {
	v, ok := g.f.Get(key)
	if !ok {
		if required {
			return 0, fmt.Errorf("model: %s: metadata key %s is missing", g.f.Path, key)
		}
		return def, nil
	}
	n, ok := v.Uint()
	if !ok || n > 1<<31 {
		return 0, fmt.Errorf("model: %s: metadata key %s must be a non-negative integer below 2^31", g.f.Path, key)
	}
	return int(n), nil
}

func (g ggufMeta) float(key string, def float64) (float64, error) {
	v, ok := g.f.Get(key)
	if !ok {
		return def, nil
	}
	f, ok := v.Float()
	if !ok {
		return 0, fmt.Errorf("model: %s: metadata key %s must be a number", g.f.Path, key)
	}
	return f, nil
}

func (g ggufMeta) str(key string) string {
	if v, ok := g.f.Get(key); ok {
		s, _ := v.String()
		return s
	}
	return ""
}

func (g ggufMeta) boolean(key string, def bool) bool {
	if v, ok := g.f.Get(key); ok {
		if b, ok := v.Bool(); ok {
			return b
		}
	}
	return def
}

// ConfigFromGGUF derives the architecture's configuration from a GGUF
// header through its registry entry (Arch.FromGGUF); it reads no tensor
// data.
func ConfigFromGGUF(f *gguf.File) (Config, error) {
	g := ggufMeta{f: f}
	g.arch = g.str("general.architecture")
	a, ok := lookupIn(ggufArch, g.arch)
	if !ok {
		return Config{}, fmt.Errorf("model: %s: architecture %q is not supported (supported: %s)", f.Path, g.arch, supported(ggufArch))
	}
	c, err := a.FromGGUF(g)
	if err != nil {
		return Config{}, err
	}
	c.Arch = a.Name
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", f.Path, err)
	}
	return c, nil
}

// common reads the hyper-parameters llama.cpp writes under the
// architecture's prefix for every transformer (lengths, heads, rope, norm
// epsilon, tied output, vocabulary); neox says how its rope rotates
// (llama.cpp's converter permutes Llama's q/k weights for adjacent-pair
// rotation, while most others keep the Hugging Face half-split layout).
// Architecture-specific keys are the caller's.
func (g ggufMeta) common(neox bool) (Config, error) {
	f, a := g.f, g.arch+"."
	var c Config
	var err error
	ints := []struct {
		dst      *int
		key      string
		def      int
		required bool
	}{
		{&c.ContextLen, a + "context_length", 0, true},
		{&c.Hidden, a + "embedding_length", 0, true},
		{&c.Layers, a + "block_count", 0, true},
		{&c.Intermediate, a + "feed_forward_length", 0, true},
		{&c.Heads, a + "attention.head_count", 0, true},
	}
	for _, it := range ints {
		if *it.dst, err = g.int(it.key, it.def, it.required); err != nil {
			return Config{}, err
		}
	}
	if c.KVHeads, err = g.int(a+"attention.head_count_kv", c.Heads, false); err != nil {
		return Config{}, err
	}
	if c.Heads <= 0 {
		return Config{}, fmt.Errorf("model: %s: %sattention.head_count must be positive", f.Path, a)
	}
	if c.HeadDim, err = g.int(a+"attention.key_length", c.Hidden/c.Heads, false); err != nil {
		return Config{}, err
	}
	rot, err := g.int(a+"rope.dimension_count", c.HeadDim, false)
	if err != nil {
		return Config{}, err
	}
	theta, err := g.float(a+"rope.freq_base", 10000)
	if err != nil {
		return Config{}, err
	}
	eps, err := g.float(a+"attention.layer_norm_rms_epsilon", 1e-5)
	if err != nil {
		return Config{}, err
	}
	c.RMSEps = float32(eps)
	c.Rope = device.RopeSpec{HeadDim: c.HeadDim, RotDim: rot, Theta: theta, Neox: neox}
	switch st := g.str(a + "rope.scaling.type"); st {
	case "", "none":
	case "linear":
		c.Rope.Scaling = "linear"
		if c.Rope.Factor, err = g.float(a+"rope.scaling.factor", 1); err != nil {
			return Config{}, err
		}
	case "yarn":
		if err := ggufYarn(g, a, &c.Rope); err != nil { // arch_moe.go
			return Config{}, err
		}
	default:
		return Config{}, fmt.Errorf("model: %s: rope scaling %q is not supported (none, linear, yarn)", f.Path, st)
	}
	if c.Rope.FreqFactors, err = ropeFreqFactors(f, rot); err != nil {
		return Config{}, err
	}
	if _, _, err := f.Tensor("output.weight"); err != nil {
		c.Tied = true
	}
	vocab, ok := f.Get("tokenizer.ggml.tokens")
	if ok {
		c.Vocab = vocab.Len()
	}
	if ti, _, err := f.Tensor("token_embd.weight"); err == nil && len(ti.Dims) == 2 {
		c.Vocab = int(min(ti.Dims[1], 1<<31))
	}
	return c, nil
}

// ropeFreqFactors reads rope_freqs.weight, the per-frequency divisors
// llama.cpp's converter writes for Llama-3.1-style scaling instead of the
// rule's parameters (rot/2 F32 values). Absent, it returns nil.
func ropeFreqFactors(f *gguf.File, rot int) ([]float64, error) {
	const name = "rope_freqs.weight"
	ti, raw, err := f.Tensor(name)
	if errors.Is(err, gguf.ErrClosed) {
		return nil, fmt.Errorf("model: %s: reading %s: %w", f.Path, name, err)
	}
	if err != nil {
		return nil, nil // no such tensor: no factors
	}
	n := uint64(1)
	for _, d := range ti.Dims {
		n *= d
	}
	if len(ti.Dims) != 1 || rot <= 0 || n != uint64(rot/2) {
		return nil, fmt.Errorf("model: %s: %s has shape %v; want [%d] (half the rotary dim %d)", f.Path, name, ti.Dims, rot/2, rot)
	}
	if ti.Type != gguf.TypeF32 || uint64(len(raw)) != 4*n {
		return nil, fmt.Errorf("model: %s: %s is %v (%d bytes); want F32 (%d bytes)", f.Path, name, ti.Type, len(raw), 4*n)
	}
	out := make([]float64, n)
	for i := range out {
		v := float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
		if !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("model: %s: %s[%d] = %v; frequency factors must be positive and finite", f.Path, name, i, v)
		}
		out[i] = v
	}
	return out, nil
}

// tokenizerFromGGUF builds the tokenizer the header describes.
func tokenizerFromGGUF(f *gguf.File) (tokenizer.Tokenizer, error) {
	g := ggufMeta{f: f}
	tv, ok := f.Get("tokenizer.ggml.tokens")
	if !ok {
		return nil, fmt.Errorf("model: %s: tokenizer.ggml.tokens is missing", f.Path)
	}
	tokens, ok := tv.Strings()
	if !ok {
		return nil, fmt.Errorf("model: %s: tokenizer.ggml.tokens must be an array of strings", f.Path)
	}
	var types []int32
	if v, ok := f.Get("tokenizer.ggml.token_type"); ok {
		ints, ok := v.Ints()
		if !ok {
			return nil, fmt.Errorf("model: %s: tokenizer.ggml.token_type must be an integer array", f.Path)
		}
		types = make([]int32, len(ints))
		for i, t := range ints {
			types[i] = int32(t)
		}
	}
	id := func(key string) int32 {
		n, err := g.int(key, -1, false)
		if err != nil || n < 0 || n >= len(tokens) {
			return -1
		}
		return int32(n)
	}
	bos, eos := id("tokenizer.ggml.bos_token_id"), id("tokenizer.ggml.eos_token_id")
	var extra []int32
	for _, k := range []string{"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"} {
		if t := id(k); t >= 0 {
			extra = append(extra, t)
		}
	}
	switch model := g.str("tokenizer.ggml.model"); model {
	case "llama":
		var scores []float32
		if v, ok := f.Get("tokenizer.ggml.scores"); ok {
			if scores, ok = v.Floats(); !ok {
				return nil, fmt.Errorf("model: %s: tokenizer.ggml.scores must be a float32 array", f.Path)
			}
		}
		prefix := g.boolean("tokenizer.ggml.add_space_prefix", true)
		return tokenizer.NewSentencePiece(tokenizer.SPMConfig{
			Tokens: tokens, Scores: scores, Types: types, BOS: bos, EOS: eos, UNK: id("tokenizer.ggml.unknown_token_id"),
			AddBOS: g.boolean("tokenizer.ggml.add_bos_token", true), AddEOS: g.boolean("tokenizer.ggml.add_eos_token", false),
			AddSpacePrefix: &prefix, ExtraEOG: extra,
		})
	case "gpt2":
		mv, ok := f.Get("tokenizer.ggml.merges")
		if !ok {
			return nil, fmt.Errorf("model: %s: a gpt2 tokenizer needs tokenizer.ggml.merges", f.Path)
		}
		merges, ok := mv.Strings()
		if !ok {
			return nil, fmt.Errorf("model: %s: tokenizer.ggml.merges must be an array of strings", f.Path)
		}
		pre := tokenizer.PreGPT2
		switch p := g.str("tokenizer.ggml.pre"); {
		case strings.HasPrefix(p, "llama") || p == "smaug-bpe":
			pre = tokenizer.PreLlama3
		case strings.HasPrefix(p, "qwen"):
			pre = tokenizer.PreQwen2
		}
		return tokenizer.NewBPE(tokenizer.BPEConfig{
			Tokens: tokens, Types: types, Merges: merges, PreTokenizer: pre, BOS: bos, EOS: eos,
			AddBOS: g.boolean("tokenizer.ggml.add_bos_token", false), AddEOS: g.boolean("tokenizer.ggml.add_eos_token", false),
			ExtraEOG: extra,
		})
	default:
		return nil, fmt.Errorf("model: %s: tokenizer model %q is not supported (llama, gpt2)", f.Path, model)
	}
}

// ggufSource reads tensors from a GGUF model (one file or a split model's
// shards, gguf.OpenModel). Every tensor type the kernels run (f32, f16,
// bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k–q6_k, iq4_nl, iq4_xs, mxfp4) is kept as
// stored: no expansion, so device weight memory is the files' bytes. The
// files the headers were parsed from stay open while loading, so a device
// that maps files serves each tensor from its own shard in place.
type ggufSource struct {
	f *gguf.File
}

var (
	_ tensorSource = ggufSource{}
	_ fileBacked   = ggufSource{}
)

// GGUFDeviceBytes is how many bytes a GGUF tensor occupies once loaded:
// its file bytes, since every type the kernels run (MXFP4 included) stays
// as stored. Plan uses it to predict the weights phase.
func GGUFDeviceBytes(ti gguf.TensorInfo) int64 { return int64(ti.Size) }

func (s ggufSource) tensor(name string) ([]byte, device.DType, []int, bool, error) {
	ti, raw, err := s.f.Tensor(name)
	if err != nil {
		// Absent tensors are reported by the caller with the name it wanted.
		if _, present := s.find(name); !present {
			return nil, 0, nil, false, nil
		}
		return nil, 0, nil, false, fmt.Errorf("model: %s: %w", s.f.Path, err)
	}
	dims := make([]int, len(ti.Dims))
	for i, d := range ti.Dims {
		if d > 1<<31 {
			return nil, 0, nil, false, fmt.Errorf("model: %s: tensor %s dimension %d is absurd", s.f.PathOf(ti), name, d)
		}
		dims[i] = int(d)
	}
	typ, ok := ti.Type.DType()
	if !ok {
		return nil, 0, nil, false, fmt.Errorf("model: %s: tensor %s has type %s; supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, mxfp4", s.f.PathOf(ti), name, ti.Type)
	}
	return raw, device.DType(typ), dims, true, nil
}

// fileRange is where a tensor's bytes lie: its shard's file and offset.
func (s ggufSource) fileRange(name string) (*os.File, int64, bool) {
	return s.f.TensorFile(name)
}

func (s ggufSource) find(name string) (gguf.TensorInfo, bool) {
	for _, t := range s.f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return gguf.TensorInfo{}, false
}

func (s ggufSource) progressTotal() int64 {
	var n int64
	for _, t := range s.f.Tensors {
		if t.Name == "rope_freqs.weight" {
			continue // read into the rope's table, not uploaded
		}
		n += GGUFDeviceBytes(t)
	}
	return n
}

// LoadGGUF loads a GGUF model file onto o.Device.
func LoadGGUF(path string, o Options) (*Model, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	f, err := gguf.OpenModel(path) // one file, or every shard of a split model
	if err != nil {
		return nil, err
	}
	defer f.Close() // mappings of its tensors outlive it
	cfg, err := ConfigFromGGUF(f)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizerFromGGUF(f)
	if err != nil {
		return nil, err
	}
	if tok.VocabSize() != cfg.Vocab {
		return nil, fmt.Errorf("model: %s: tokenizer has %d tokens, the embedding %d rows", path, tok.VocabSize(), cfg.Vocab)
	}
	name := ggufMeta{f: f}.str("general.name")
	if name == "" {
		name = gguf.BaseName(path)
	}
	m := &Model{Name: name, Path: path, Config: cfg, Tokenizer: tok, ChatTemplate: ggufMeta{f: f}.str("tokenizer.chat_template")}
	m.BOSText, m.EOSText = tok.TokenText(tok.BOS()), tok.TokenText(tok.EOS())
	if err := m.build(ggufSource{f: f}, o); err != nil {
		return nil, err
	}
	return m, nil
}
