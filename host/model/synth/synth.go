package synth

import (
	"fmt"
	"io"
	"math"

	"github.com/kvhost/kvhost/host/model/gguf"
)

// Spec is the shape of a generated model.
type Spec struct {
	Name         string
	Hidden       int
	Layers       int
	Heads        int
	KVHeads      int
	Intermediate int
	Vocab        int
	ContextLen   int
	// DType is the file type: f32, f16, bf16 or one of llama-quantize's
	// types (q8_0, q4_0, q4_k_m, …: DTypes lists them), whose tensors are
	// mixed as llama-quantize mixes them (ftype.go).
	DType string
	Seed  uint64
	// RopeTheta is llama.rope.freq_base; 0 means 10000.
	RopeTheta float32
	// Arch is the architecture: "" or llama, the sliding-window family
	// (mistral, gemma2, gemma3, gpt-oss: swa.go, with Window the sliding
	// window) or the expert family (qwen3moe, deepseek2: moe.go, with its
	// MoE and MLA shapes); Architectures lists them.
	Arch   string
	Window int
	// Experts and ExpertsUsed are gpt-oss's expert count and top-k;
	// DenseExperts stores the experts in DType instead of MXFP4 (as the
	// converter does for a dequantized checkpoint).
	Experts, ExpertsUsed int
	DenseExperts         bool
	// Tokenizer is "spm" (the default: a SentencePiece vocabulary, the
	// Llama-2 template) or "bpe" (byte-level BPE, NewBPEVocab, the
	// ChatML template with tools).
	Tokenizer string
	// Parallel draws each tensor in independent chunks (chunkElems values,
	// each from its own generator seeded by Seed, tensor and chunk) on all
	// cores, for multi-GB models; the bytes differ from the sequential
	// stream the small presets use.
	Parallel bool
	MoE      *MoESpec
	MLA      *MLASpec
}

// Sizes are the presets `gen-model --size` offers.
var Sizes = map[string]Spec{
	"tiny":   {Hidden: 64, Layers: 2, Heads: 4, KVHeads: 2, Intermediate: 192, Vocab: 32000, ContextLen: 2048},
	"small":  {Hidden: 288, Layers: 6, Heads: 6, KVHeads: 6, Intermediate: 768, Vocab: 32000, ContextLen: 2048},
	"medium": {Hidden: 768, Layers: 12, Heads: 12, KVHeads: 12, Intermediate: 2048, Vocab: 32000, ContextLen: 2048},
	// llama3-8b is Llama-3-8B's shape (about 8.0e9 parameters, 16 GB in
	// bf16); it is written in parallel chunks, streamed.
	"llama3-8b": {Hidden: 4096, Layers: 32, Heads: 32, KVHeads: 8, Intermediate: 14336, Vocab: 128256, ContextLen: 8192, RopeTheta: 500000, Parallel: true},
}

// Preset returns a size preset in a dtype.
func Preset(size, dtype string) (Spec, error) {
	s, ok := Sizes[size]
	if !ok {
		return Spec{}, fmt.Errorf("synth: unknown size %q (tiny, small, medium, llama3-8b)", size)
	}
	name, _, err := lookupFType(dtype)
	if err != nil {
		return Spec{}, err
	}
	s.DType, s.Name, s.Seed = name, "kvhost-demo-"+size+"-"+name, 0x6b76686f7374
	return s, nil
}

// Params counts the parameters of the spec (tied embeddings are not used).
func (s Spec) Params() int64 {
	if s.MoE != nil {
		return s.archParams()
	}
	if s.Arch != "" && s.Arch != "llama" {
		return swaParams(s)
	}
	h, i, hd := int64(s.Hidden), int64(s.Intermediate), int64(s.Hidden/s.Heads)
	kv := int64(s.KVHeads) * hd
	per := 2*h + h*h*2 + 2*h*kv + 3*h*i
	return int64(s.Layers)*per + 2*int64(s.Vocab)*h + h
}

// ChatTemplate is the Llama-2 chat template the demo models carry.
const ChatTemplate = "{% if messages[0]['role'] == 'system' %}{% set system_message = '<<SYS>>\\n' + messages[0]['content'] | trim + '\\n<</SYS>>\\n\\n' %}{% set messages = messages[1:] %}{% else %}{% set system_message = '' %}{% endif %}{% for message in messages %}{% if loop.index0 == 0 %}{% set content = system_message + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content | trim + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + content | trim + ' ' + eos_token }}{% endif %}{% endfor %}"

// rng is splitmix64: fast, and the same stream on every platform.
type rng uint64

func (r *rng) next() uint64 {
	*r += 0x9e3779b97f4a7c15
	z := uint64(*r)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// normal draws N(0,1) by Box-Muller.
func (r *rng) normal() float64 {
	u1 := (float64(r.next()>>11) + 0.5) / (1 << 53)
	u2 := float64(r.next()>>11) / (1 << 53)
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

// Write generates the model described by s into w, streaming: one tensor
// chunk at a time is in memory, whatever the model's size. progress, if
// set, is called with (tensors done, tensors total).
func Write(w io.Writer, s Spec, progress func(done, total int)) error {
	lay := layout
	switch {
	case swaArch(s.Arch):
		lay = layoutSWA
	case s.Arch != "" && s.Arch != "llama":
		lay = archLayout
	}
	kvs, plans, err := lay(s)
	if err != nil {
		return err
	}
	return stream(w, s, kvs, plans, progress)
}

// tensorPlan is one tensor to generate: a vector of ones, or a rows×cols
// matrix ~ N(0, std²) in the spec's dtype.
type tensorPlan struct {
	name       string
	rows, cols int
	std        float64
	vec        bool
	// depth > 0 stacks that many matrices (or vectors) as a third (second)
	// dimension (experts, heads); router matrices stay F32 in quantized
	// files (as llama-quantize keeps ffn_gate_inp); a bias vector is drawn
	// ~ N(0, 0.1²) and a vector with std > 0 ~ N(mean, std²) instead of
	// ones; mxfp4 stores the matrix as MXFP4.
	depth        int
	router, bias bool
	mean         float64
	mxfp4        bool
}

// layout returns the metadata and the tensors, in file order.
func layout(s Spec) ([]gguf.KV, []tensorPlan, error) {
	if s.Heads <= 0 || s.Hidden%s.Heads != 0 || s.KVHeads <= 0 || s.Heads%s.KVHeads != 0 {
		return nil, nil, fmt.Errorf("synth: heads %d / kv heads %d do not divide hidden %d", s.Heads, s.KVHeads, s.Hidden)
	}
	tok, err := tokenizerKVs(s)
	if err != nil {
		return nil, nil, err
	}
	hd := s.Hidden / s.Heads
	_, ft, err := lookupFType(s.DType)
	if err != nil {
		return nil, nil, err
	}
	theta := s.RopeTheta
	if theta == 0 {
		theta = 10000
	}
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: gguf.NewString("llama")},
		{Key: "general.name", Value: gguf.NewString(s.Name)},
		{Key: "general.file_type", Value: gguf.NewUint32(ft.id)},
		{Key: "llama.context_length", Value: gguf.NewUint32(uint32(s.ContextLen))},
		{Key: "llama.embedding_length", Value: gguf.NewUint32(uint32(s.Hidden))},
		{Key: "llama.block_count", Value: gguf.NewUint32(uint32(s.Layers))},
		{Key: "llama.feed_forward_length", Value: gguf.NewUint32(uint32(s.Intermediate))},
		{Key: "llama.attention.head_count", Value: gguf.NewUint32(uint32(s.Heads))},
		{Key: "llama.attention.head_count_kv", Value: gguf.NewUint32(uint32(s.KVHeads))},
		{Key: "llama.rope.dimension_count", Value: gguf.NewUint32(uint32(hd))},
		{Key: "llama.rope.freq_base", Value: gguf.NewFloat32(theta)},
		{Key: "llama.attention.layer_norm_rms_epsilon", Value: gguf.NewFloat32(1e-5)},
		{Key: "llama.vocab_size", Value: gguf.NewUint32(uint32(s.Vocab))},
	}
	kvs = append(kvs, tok...)
	if ft.base.Dequantizable() {
		kvs = append(kvs, gguf.KV{Key: "general.quantization_version", Value: gguf.NewUint32(2)})
	}
	kv := s.KVHeads * hd
	plans := []tensorPlan{{name: "token_embd.weight", rows: s.Vocab, cols: s.Hidden, std: 1}}
	for l := 0; l < s.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		// Queries and keys are scaled up so attention is sharp and depends
		// on which tokens came before, as in a trained model.
		plans = append(plans,
			tensorPlan{name: p + "attn_norm.weight", cols: s.Hidden, vec: true},
			tensorPlan{name: p + "attn_q.weight", rows: s.Hidden, cols: s.Hidden, std: 2 / math.Sqrt(float64(s.Hidden))},
			tensorPlan{name: p + "attn_k.weight", rows: kv, cols: s.Hidden, std: 2 / math.Sqrt(float64(s.Hidden))},
			tensorPlan{name: p + "attn_v.weight", rows: kv, cols: s.Hidden, std: 1 / math.Sqrt(float64(s.Hidden))},
			tensorPlan{name: p + "attn_output.weight", rows: s.Hidden, cols: s.Hidden, std: 1 / math.Sqrt(float64(s.Hidden))},
			tensorPlan{name: p + "ffn_norm.weight", cols: s.Hidden, vec: true},
			tensorPlan{name: p + "ffn_gate.weight", rows: s.Intermediate, cols: s.Hidden, std: 1 / math.Sqrt(float64(s.Hidden))},
			tensorPlan{name: p + "ffn_up.weight", rows: s.Intermediate, cols: s.Hidden, std: 1 / math.Sqrt(float64(s.Hidden))},
			tensorPlan{name: p + "ffn_down.weight", rows: s.Hidden, cols: s.Intermediate, std: 1 / math.Sqrt(float64(s.Intermediate))},
		)
	}
	plans = append(plans,
		tensorPlan{name: "output_norm.weight", cols: s.Hidden, vec: true},
		tensorPlan{name: "output.weight", rows: s.Vocab, cols: s.Hidden, std: 1 / math.Sqrt(float64(s.Hidden))},
	)
	return kvs, plans, nil
}

// withTemplate replaces kvs' chat template with template when set.
func withTemplate(kvs []gguf.KV, template string) []gguf.KV {
	for i := range kvs {
		if template != "" && kvs[i].Key == "tokenizer.chat_template" {
			kvs[i].Value = gguf.NewString(template)
		}
	}
	return kvs
}

// tokenizerKVs is the tokenizer's metadata for s.Tokenizer, with the
// control tokens and template of s's architecture (archTokens).
func tokenizerKVs(s Spec) ([]gguf.KV, error) {
	extra, template := archTokens(s)
	switch s.Tokenizer {
	case "", "spm":
		v, err := buildVocab(s.Vocab - len(extra))
		if err != nil {
			return nil, err
		}
		for _, t := range extra {
			v.Tokens, v.Scores, v.Types = append(v.Tokens, t), append(v.Scores, 0), append(v.Types, 3)
		}
		return withTemplate([]gguf.KV{
			{Key: "tokenizer.ggml.model", Value: gguf.NewString("llama")},
			{Key: "tokenizer.ggml.tokens", Value: gguf.NewStringArray(v.Tokens)},
			{Key: "tokenizer.ggml.scores", Value: gguf.NewFloat32Array(v.Scores)},
			{Key: "tokenizer.ggml.token_type", Value: gguf.NewInt32Array(v.Types)},
			{Key: "tokenizer.ggml.bos_token_id", Value: gguf.NewUint32(1)},
			{Key: "tokenizer.ggml.eos_token_id", Value: gguf.NewUint32(2)},
			{Key: "tokenizer.ggml.unknown_token_id", Value: gguf.NewUint32(0)},
			{Key: "tokenizer.ggml.add_bos_token", Value: gguf.NewBool(true)},
			{Key: "tokenizer.ggml.add_eos_token", Value: gguf.NewBool(false)},
			{Key: "tokenizer.chat_template", Value: gguf.NewString(ChatTemplate)},
		}, template), nil
	case "bpe":
		v, err := NewBPEVocab(s.Vocab - len(extra))
		if err != nil {
			return nil, err
		}
		for _, t := range extra {
			v.Tokens, v.Types = append(v.Tokens, t), append(v.Types, 3)
		}
		return withTemplate([]gguf.KV{
			{Key: "tokenizer.ggml.model", Value: gguf.NewString("gpt2")},
			{Key: "tokenizer.ggml.pre", Value: gguf.NewString("gpt2")},
			{Key: "tokenizer.ggml.tokens", Value: gguf.NewStringArray(v.Tokens)},
			{Key: "tokenizer.ggml.token_type", Value: gguf.NewInt32Array(v.Types)},
			{Key: "tokenizer.ggml.merges", Value: gguf.NewStringArray(v.Merges)},
			{Key: "tokenizer.ggml.bos_token_id", Value: gguf.NewUint32(uint32(v.BOS))},
			{Key: "tokenizer.ggml.eos_token_id", Value: gguf.NewUint32(uint32(v.EOS))},
			{Key: "tokenizer.ggml.eot_token_id", Value: gguf.NewUint32(uint32(v.EOT))},
			{Key: "tokenizer.ggml.add_bos_token", Value: gguf.NewBool(true)},
			{Key: "tokenizer.chat_template", Value: gguf.NewString(ChatMLTemplate)},
		}, template), nil
	}
	return nil, fmt.Errorf("synth: unknown tokenizer %q (spm, bpe)", s.Tokenizer)
}
