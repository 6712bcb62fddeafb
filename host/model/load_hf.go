package model

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/model/hf"
	"github.com/kvhost/kvhost/host/model/safetensors"
	"github.com/kvhost/kvhost/host/model/tokenizer"
)

// ConfigFromHF derives the configuration from config.json's bytes through
// the registry entry of its first architecture (Arch.FromHF).
func ConfigFromHF(raw []byte, path string) (Config, error) {
	n, err := hf.Normalize(raw) // transformers 5's spellings, text_config
	if err != nil {
		return Config{}, fmt.Errorf("model: %s: %w", path, err)
	}
	raw = n.JSON
	hc, err := hf.ParseConfig(raw)
	if err != nil {
		return Config{}, fmt.Errorf("model: %s: %w", path, err)
	}
	if len(hc.Architectures) == 0 {
		return Config{}, fmt.Errorf("model: %s: config.json has no architectures", path)
	}
	a, ok := lookupIn(hfArch, hc.Architectures[0])
	if !ok {
		return Config{}, fmt.Errorf("model: %s: architecture %q is not supported (%s)", path, hc.Architectures[0], supported(hfArch))
	}
	c, err := a.FromHF(hc, raw, path)
	if err != nil {
		return Config{}, err
	}
	c.Arch = a.Name
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// hfCommon reads the fields every transformer's config.json has in the
// Llama family's spelling. Hugging Face keeps q/k in the half-split
// layout, so the rope rotates NeoX-style.
func hfCommon(hc hf.Config, path string) (Config, error) {
	c := Config{
		Hidden: hc.HiddenSize, Layers: hc.NumHiddenLayers, Heads: hc.NumAttentionHeads,
		KVHeads: hc.KVHeads(), HeadDim: hc.HeadDimension(), Intermediate: hc.IntermediateSize,
		Vocab: hc.VocabSize, ContextLen: hc.MaxPositionEmbeddings, RMSEps: float32(hc.RMSNormEps),
		QKVBias: hc.AttentionBias, Tied: hc.TieWordEmbeddings,
	}
	if c.RMSEps == 0 {
		c.RMSEps = 1e-6
	}
	theta := hc.RopeTheta
	if theta == 0 {
		theta = 10000
	}
	c.Rope = device.RopeSpec{HeadDim: c.HeadDim, RotDim: c.HeadDim, Theta: theta, Neox: true}
	if rs := hc.RopeScaling; rs != nil {
		switch rs.Type {
		case "", "default":
		case "linear", "llama3", "yarn":
			c.Rope.Scaling, c.Rope.Factor = rs.Type, rs.Factor
			c.Rope.LowFreqFactor, c.Rope.HighFreqFactor = rs.LowFreqFactor, rs.HighFreqFactor
			c.Rope.OriginalMaxPos = rs.OriginalMaxPositionEmbeddings
		default:
			return Config{}, fmt.Errorf("model: %s: rope_scaling type %q is not supported (linear, llama3, yarn)", path, rs.Type)
		}
	}
	return c, nil
}

// hfNames maps canonical (GGUF) tensor names to Hugging Face names.
func hfName(canon string) string {
	switch canon {
	case "token_embd.weight":
		return "model.embed_tokens.weight"
	case "output_norm.weight":
		return "model.norm.weight"
	case "output.weight":
		return "lm_head.weight"
	}
	rest, ok := strings.CutPrefix(canon, "blk.")
	if !ok {
		return canon
	}
	layer, part, _ := strings.Cut(rest, ".")
	repl := map[string]string{
		"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
		"attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
		"attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
		"attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias", "attn_v.bias": "self_attn.v_proj.bias",
		"attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
		"ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight",
	}
	return "model.layers." + layer + "." + repl[part]
}

type hfSource struct {
	set  *safetensors.Set
	path string
	name func(canon string) string                                                 // Arch.HFTensor
	read func(s hfSource, canon string) ([]byte, device.DType, []int, bool, error) // Arch.HFRead
	// wrapped: the language model of a multimodal wrapper (load_hf_wrapped.go)
	wrapped bool
}

var stTypes = map[safetensors.DType]device.DType{
	safetensors.F32: device.F32, safetensors.F16: device.F16, safetensors.BF16: device.BF16,
}

func (s hfSource) tensor(canon string) ([]byte, device.DType, []int, bool, error) {
	if s.read != nil {
		return s.read(s, canon)
	}
	if strings.HasSuffix(canon, "_exps.weight") {
		raw, typ, dims, ok, err := s.experts(canon) // arch_moe.go: per-expert tensors stacked
		if ok || err != nil {
			return raw, typ, dims, ok, err
		}
		return s.tf5Experts(canon) // load_hf_fused.go: transformers 5's fused tensors
	}
	return s.named(s.name(canon))
}

// named reads the HF tensor name, ok=false when absent.
func (s hfSource) named(name string) ([]byte, device.DType, []int, bool, error) {
	if s.wrapped {
		name = s.textName(name)
	}
	if _, ok := s.set.Info(name); !ok {
		return nil, 0, nil, false, nil
	}
	ti, raw, err := s.set.Tensor(name)
	if err != nil {
		return nil, 0, nil, false, fmt.Errorf("model: %s: %w", s.path, err)
	}
	typ, ok := stTypes[ti.DType]
	if !ok {
		return nil, 0, nil, false, fmt.Errorf("model: %s: tensor %s has dtype %s; supported: F32, F16, BF16", s.path, name, ti.DType)
	}
	// safetensors shapes are row-major [rows, cols]; canonical dims put the
	// row length first, as GGUF does.
	dims := make([]int, len(ti.Shape))
	for i, d := range ti.Shape {
		if d > 1<<31 {
			return nil, 0, nil, false, fmt.Errorf("model: %s: tensor %s dimension %d is absurd", s.path, name, d)
		}
		dims[len(dims)-1-i] = int(d)
	}
	return raw, typ, dims, true, nil
}

func (s hfSource) progressTotal() int64 {
	var n int64
	for _, name := range s.set.Names() {
		if ti, ok := s.set.Info(name); ok {
			n += int64(ti.End - ti.Begin)
		}
	}
	return n
}

// eogTokenizer adds config.json's end-of-sequence ids to a tokenizer's own.
type eogTokenizer struct {
	tokenizer.Tokenizer
	extra []int32
}

func (t eogTokenizer) EOG(id int32) bool {
	for _, e := range t.extra {
		if e == id {
			return true
		}
	}
	return t.Tokenizer.EOG(id)
}

// EncodeWithOptions forwards to the wrapped tokenizer so callers can still
// ask for special-token parsing.
func (t eogTokenizer) EncodeWithOptions(text string, o tokenizer.EncodeOptions) ([]int32, error) {
	if e, ok := t.Tokenizer.(interface {
		EncodeWithOptions(string, tokenizer.EncodeOptions) ([]int32, error)
	}); ok {
		return e.EncodeWithOptions(text, o)
	}
	return t.Tokenizer.Encode(text, o.AddSpecial)
}

// LoadHF loads a Hugging Face model directory onto o.Device.
func LoadHF(dir string, o Options) (*Model, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	hm, err := hf.Open(dir)
	if err != nil {
		return nil, err
	}
	cfg, err := ConfigFromHF(hm.ConfigJSON, filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	norm, err := hf.Normalize(hm.ConfigJSON) // ConfigFromHF has read it: no error
	if err != nil {
		return nil, err
	}
	a, err := cfg.arch()
	if err != nil {
		return nil, err
	}
	if hm.TokenizerJSON == nil {
		return nil, fmt.Errorf("model: %s: tokenizer.json is missing", dir)
	}
	tok, err := tokenizer.FromHFJSON(hm.TokenizerJSON, hm.TokenizerConfigJSON)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", dir, err)
	}
	if tok.VocabSize() > cfg.Vocab {
		return nil, fmt.Errorf("model: %s: tokenizer has %d tokens, more than vocab_size %d", dir, tok.VocabSize(), cfg.Vocab)
	}
	var extra []int32
	for _, id := range hm.Config.EOSTokenID {
		extra = append(extra, int32(id))
	}
	set, err := hm.OpenWeights()
	if err != nil {
		return nil, err
	}
	defer set.Close()
	m := &Model{Name: filepath.Base(filepath.Clean(dir)), Path: dir, Config: cfg, Tokenizer: eogTokenizer{tok, extra}, ChatTemplate: hm.ChatTemplate}
	if bos := tok.BOS(); bos >= 0 {
		m.BOSText = tok.TokenText(bos)
	}
	if eos := tok.EOS(); eos >= 0 {
		m.EOSText = tok.TokenText(eos)
	}
	if norm.Wrapper != "" {
		m.Notes = append(m.Notes, wrapperNote(norm.Wrapper))
	}
	if err := m.build(hfSource{set: set, path: dir, name: a.HFTensor, read: a.HFRead, wrapped: norm.Wrapper != ""}, o); err != nil {
		return nil, err
	}
	return m, nil
}
