package synth

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/kvhost/kvhost/host/model/gguf"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// HybridSpec is the shape of a generated hybrid Mamba-2 model: Nemotron-H
// (GGUF nemotron_h: one part per layer, Pattern letters M, * and -) or
// Granite-4.0-H (GGUF granitehybrid: a mixer, M or *, and a SwiGLU MLP in
// every layer, with Granite's multipliers). The tensor names and metadata
// keys are llama.cpp's (docs/architectures/mamba2-hybrids.md), so
// llama.cpp loads the files too.
type HybridSpec struct {
	Arch    string // nemotron_h or granitehybrid
	Name    string
	Pattern string // one letter per layer: M mamba, * attention, - MLP (nemotron_h only)
	Hidden  int
	Heads   int // attention heads (head dim Hidden/Heads)
	KVHeads int
	FF      int // MLP width
	// Mamba-2 mixer: heads × head dim = inner size; groups share B and C.
	MambaHeads, MambaHeadDim, Groups, State, ConvKernel int
	Vocab, ContextLen                                   int
	// Granite multipliers (granitehybrid only; 0 means 1, attention
	// 1/sqrt(head dim)).
	EmbedScale, ResidualScale, AttnScale, LogitScale float32
	// Experts > 0 (granitehybrid only) makes every MLP a mixture of
	// Experts SwiGLU experts of ExpertFF, ExpertsUsed per token, beside the
	// shared MLP of FF (Granite-4.0-H tiny/small).
	Experts, ExpertsUsed, ExpertFF int
	// DType is the matrices' file type: f32, f16 or bf16 (vectors, the conv
	// weights and the per-head SSM parameters are always f32).
	DType string
	Seed  uint64
	// Tokenizer is "spm" (the default) or "bpe", as Spec.Tokenizer.
	Tokenizer string
}

// HybridSizes are `gen-model --arch nemotron_h|granitehybrid --size`'s
// presets: small states so tests run quickly.
var HybridSizes = map[string]HybridSpec{
	"tiny": {Hidden: 64, Heads: 4, KVHeads: 2, FF: 128, MambaHeads: 8, MambaHeadDim: 16, Groups: 2, State: 16, ConvKernel: 4,
		Vocab: 1024, ContextLen: 4096},
	"small": {Hidden: 256, Heads: 8, KVHeads: 2, FF: 768, MambaHeads: 16, MambaHeadDim: 32, Groups: 4, State: 32, ConvKernel: 4,
		Vocab: 8192, ContextLen: 32768},
	"medium": {Hidden: 768, Heads: 12, KVHeads: 4, FF: 2048, MambaHeads: 24, MambaHeadDim: 64, Groups: 8, State: 64, ConvKernel: 4,
		Vocab: 32000, ContextLen: 32768},
}

// hybridPatterns are the layer patterns per size: Nemotron-H's mixes the
// three kinds (the published models: mostly M and -, a few *), Granite's
// the two mixers (one attention layer in four or so).
var hybridPatterns = map[string]map[string]string{
	"nemotron_h":    {"tiny": "M-*-M-", "small": "M-M-M*-M-M-M*-", "medium": "M-M-M-M*-M-M-M-M*-M-M-"},
	"granitehybrid": {"tiny": "MM*M", "small": "MMM*MMM*", "medium": "MMMMM*MMMMM*"},
}

// HybridPreset returns a size preset of arch in dtype.
func HybridPreset(arch, size, dtype string) (HybridSpec, error) {
	pats, ok := hybridPatterns[arch]
	if !ok {
		return HybridSpec{}, fmt.Errorf("synth: hybrid architecture %q unknown (nemotron_h, granitehybrid)", arch)
	}
	s, ok := HybridSizes[size]
	if !ok {
		return HybridSpec{}, fmt.Errorf("synth: unknown size %q for %s (tiny, small, medium)", size, arch)
	}
	switch dtype {
	case "f32", "f16", "bf16":
	default:
		return HybridSpec{}, fmt.Errorf("synth: %s models are written as f32, f16 or bf16, not %q", arch, dtype)
	}
	s.Arch, s.Pattern, s.DType = arch, pats[size], dtype
	s.Name, s.Seed = "kvhost-demo-"+arch+"-"+size+"-"+dtype, 0x6d616d6261
	if arch == "granitehybrid" { // Granite-4.0-H's multipliers, roughly
		s.EmbedScale, s.ResidualScale, s.AttnScale, s.LogitScale = 12, 0.25, 0.0078125*8, 8
	}
	return s, nil
}

func (s HybridSpec) inner() int   { return s.MambaHeads * s.MambaHeadDim }
func (s HybridSpec) convDim() int { return s.inner() + 2*s.Groups*s.State }

// Params counts the spec's parameters.
func (s HybridSpec) Params() int64 {
	h, ff, hd := int64(s.Hidden), int64(s.FF), int64(s.Hidden/max(1, s.Heads))
	I, CD, H := int64(s.inner()), int64(s.convDim()), int64(s.MambaHeads)
	n := 2*int64(s.Vocab)*h + h
	for _, c := range s.Pattern {
		n += h
		switch c {
		case 'M':
			n += h*(I+CD+H) + CD*int64(s.ConvKernel) + CD + 3*H + I + I*h
		case '*':
			n += 2*h*h + 2*h*int64(s.KVHeads)*hd
		case '-':
			n += 2 * h * ff
		}
		if s.Arch == "granitehybrid" {
			n += h + 3*h*ff + int64(s.Experts)*(h+3*h*int64(s.ExpertFF))
		}
	}
	return n
}

// Validate names the first field that cannot describe the model.
func (s HybridSpec) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"hidden", s.Hidden}, {"heads", s.Heads}, {"kv heads", s.KVHeads}, {"ff", s.FF}, {"mamba heads", s.MambaHeads},
		{"mamba head dim", s.MambaHeadDim}, {"groups", s.Groups}, {"state", s.State}, {"vocab", s.Vocab}, {"context", s.ContextLen}} {
		if f.v < 1 || f.v > 1<<20 {
			return fmt.Errorf("synth: %s %d is out of range [1, %d]", f.name, f.v, 1<<20)
		}
	}
	switch {
	case s.Hidden%s.Heads != 0 || s.Heads%s.KVHeads != 0:
		return fmt.Errorf("synth: heads %d / kv heads %d do not divide hidden %d", s.Heads, s.KVHeads, s.Hidden)
	case s.MambaHeads%s.Groups != 0:
		return fmt.Errorf("synth: mamba heads %d are not a multiple of groups %d", s.MambaHeads, s.Groups)
	case s.ConvKernel < 2 || s.ConvKernel > kcpu.MaxConvKernel:
		return fmt.Errorf("synth: conv kernel %d is out of range [2, %d]", s.ConvKernel, kcpu.MaxConvKernel)
	case len(s.Pattern) == 0:
		return fmt.Errorf("synth: empty layer pattern")
	case s.Experts > 0 && (s.Arch != "granitehybrid" || s.ExpertsUsed < 1 || s.ExpertsUsed > s.Experts || s.ExpertFF < 1):
		return fmt.Errorf("synth: %d experts, %d used, width %d: want a granitehybrid with 1 <= used <= experts and a positive width", s.Experts, s.ExpertsUsed, s.ExpertFF)
	}
	for i, c := range s.Pattern {
		if c != 'M' && c != '*' && (c != '-' || s.Arch != "nemotron_h") {
			return fmt.Errorf("synth: %s layer %d kind %q: want M, * or (nemotron_h) -", s.Arch, i, c)
		}
	}
	return nil
}

// hybridTensor is one generated tensor: dims (row length first) and values.
type hybridTensor struct {
	name string
	dims []uint64
	vals []float32
	mat  bool // stored in the spec's dtype; otherwise f32
}

// WriteHybrid generates the model s describes into w as GGUF. The whole
// model is drawn in memory (the presets are small).
func WriteHybrid(w io.Writer, s HybridSpec) error {
	if err := s.Validate(); err != nil {
		return err
	}
	var mt gguf.TensorType
	switch s.DType {
	case "f32":
		mt = gguf.TypeF32
	case "f16":
		mt = gguf.TypeF16
	case "bf16":
		mt = gguf.TypeBF16
	default:
		return fmt.Errorf("synth: dtype %q: want f32, f16 or bf16", s.DType)
	}
	kvs, err := s.metadata(mt)
	if err != nil {
		return err
	}
	specs := make([]gguf.TensorSpec, 0, 16*len(s.Pattern))
	for _, t := range s.tensors() {
		typ := gguf.TypeF32
		if t.mat {
			typ = mt
		}
		specs = append(specs, gguf.TensorSpec{Name: t.name, Dims: t.dims, Type: typ, Data: encode(typ, t.vals)})
	}
	if err := gguf.Write(w, kvs, specs, 0); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

func encode(t gguf.TensorType, v []float32) []byte {
	switch t {
	case gguf.TypeF16, gguf.TypeBF16:
		b := make([]byte, 2*len(v))
		for i, f := range v {
			h := kcpu.F32ToF16(f)
			if t == gguf.TypeBF16 {
				h = kcpu.F32ToBF16(f)
			}
			binary.LittleEndian.PutUint16(b[2*i:], h)
		}
		return b
	}
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

// metadata is the GGUF header's key-values, as llama.cpp's converters
// write them for the architecture.
func (s HybridSpec) metadata(mt gguf.TensorType) ([]gguf.KV, error) {
	a := s.Arch + "."
	n := len(s.Pattern)
	kvh, ff := make([]int32, n), make([]int32, n)
	for i, c := range s.Pattern {
		switch c {
		case '*':
			kvh[i] = int32(s.KVHeads)
		case '-':
			ff[i] = int32(s.FF)
		}
	}
	ftype := map[gguf.TensorType]uint32{gguf.TypeF32: 0, gguf.TypeF16: 1, gguf.TypeBF16: 32}[mt]
	u := func(k string, v int) gguf.KV { return gguf.KV{Key: a + k, Value: gguf.NewUint32(uint32(v))} }
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: gguf.NewString(s.Arch)},
		{Key: "general.name", Value: gguf.NewString(s.Name)},
		{Key: "general.file_type", Value: gguf.NewUint32(ftype)},
		u("context_length", s.ContextLen), u("embedding_length", s.Hidden), u("block_count", n),
		u("attention.head_count", s.Heads),
		{Key: a + "attention.head_count_kv", Value: gguf.NewInt32Array(kvh)},
		u("attention.key_length", s.Hidden/s.Heads), u("attention.value_length", s.Hidden/s.Heads),
		{Key: a + "attention.layer_norm_rms_epsilon", Value: gguf.NewFloat32(1e-5)},
		u("ssm.conv_kernel", s.ConvKernel), u("ssm.state_size", s.State), u("ssm.group_count", s.Groups),
		u("ssm.inner_size", s.inner()), u("ssm.time_step_rank", s.MambaHeads),
		u("vocab_size", s.Vocab),
	}
	if s.Arch == "nemotron_h" {
		kvs = append(kvs, gguf.KV{Key: a + "feed_forward_length", Value: gguf.NewInt32Array(ff)})
	} else {
		ff := s.FF
		if s.Experts > 0 { // llama.cpp: feed_forward_length is the experts' width
			ff = s.ExpertFF
			kvs = append(kvs, u("expert_count", s.Experts), u("expert_used_count", s.ExpertsUsed))
		}
		kvs = append(kvs, u("feed_forward_length", ff), u("expert_shared_feed_forward_length", s.FF),
			gguf.KV{Key: a + "rope.scaling.finetuned", Value: gguf.NewBool(false)})
		for _, m := range []struct {
			key string
			v   float32
		}{{"embedding_scale", s.EmbedScale}, {"residual_scale", s.ResidualScale}, {"attention.scale", s.AttnScale}, {"logit_scale", s.LogitScale}} {
			if m.v != 0 {
				kvs = append(kvs, gguf.KV{Key: a + m.key, Value: gguf.NewFloat32(m.v)})
			}
		}
	}
	tok, err := tokenizerKVs(Spec{Tokenizer: s.Tokenizer, Vocab: s.Vocab})
	if err != nil {
		return nil, err
	}
	return append(kvs, tok...), nil
}

// tensors draws every tensor in file order: projections ~ N(0, 1/fan_in)
// (queries and keys sharpened as in the Llama generator), norms at 1, and
// the Mamba parameters as HF initialises them (A_log = log U(1, 16), dt_bias
// the inverse softplus of a time step log-uniform in [0.001, 0.1], D ~ U(0.5,
// 1.5)), stored as llama.cpp stores them (A = −exp(A_log)).
func (s HybridSpec) tensors() []hybridTensor {
	r := rng(s.Seed)
	normal := func(n int, std float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.normal() * std)
		}
		return v
	}
	uniform := func(n int, lo, hi float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = lo + (hi-lo)*float64(r.next()>>11)/(1<<53)
		}
		return v
	}
	ones := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	mat := func(name string, rows, cols int, std float64) hybridTensor {
		return hybridTensor{name: name, dims: []uint64{uint64(cols), uint64(rows)}, vals: normal(rows*cols, std), mat: true}
	}
	vec := func(name string, v []float32) hybridTensor {
		return hybridTensor{name: name, dims: []uint64{uint64(len(v))}, vals: v}
	}
	f32 := func(v []float64) []float32 {
		out := make([]float32, len(v))
		for i, x := range v {
			out[i] = float32(x)
		}
		return out
	}
	h, hd := s.Hidden, s.Hidden/s.Heads
	I, CD, H := s.inner(), s.convDim(), s.MambaHeads
	inv := func(n int) float64 { return 1 / math.Sqrt(float64(n)) }
	ts := []hybridTensor{mat("token_embd.weight", s.Vocab, h, 1)}
	for l, c := range s.Pattern {
		p := fmt.Sprintf("blk.%d.", l)
		ts = append(ts, vec(p+"attn_norm.weight", ones(h)))
		switch c {
		case 'M':
			a := f32(uniform(H, 1, 16)) // exp(A_log)
			for i := range a {
				a[i] = -a[i] // A = −exp(A_log)
			}
			dt := uniform(H, math.Log(0.001), math.Log(0.1))
			dtb := make([]float32, H)
			for i, x := range dt {
				d := math.Exp(x)
				dtb[i] = float32(d + math.Log(-math.Expm1(-d))) // inverse softplus
			}
			ts = append(ts,
				mat(p+"ssm_in.weight", I+CD+H, h, inv(h)),
				hybridTensor{name: p + "ssm_conv1d.weight", dims: []uint64{uint64(s.ConvKernel), uint64(CD)}, vals: normal(CD*s.ConvKernel, inv(s.ConvKernel))},
				vec(p+"ssm_conv1d.bias", normal(CD, 0.1)),
				vec(p+"ssm_dt.bias", dtb),
				hybridTensor{name: p + "ssm_a", dims: []uint64{1, uint64(H)}, vals: a},
				hybridTensor{name: p + "ssm_d", dims: []uint64{1, uint64(H)}, vals: f32(uniform(H, 0.5, 1.5))},
				hybridTensor{name: p + "ssm_norm.weight", dims: []uint64{uint64(I / s.Groups), uint64(s.Groups)}, vals: f32(uniform(I, 0.5, 1.5))},
				mat(p+"ssm_out.weight", h, I, inv(I)),
			)
		case '*':
			ts = append(ts,
				mat(p+"attn_q.weight", s.Heads*hd, h, 2*inv(h)),
				mat(p+"attn_k.weight", s.KVHeads*hd, h, 2*inv(h)),
				mat(p+"attn_v.weight", s.KVHeads*hd, h, inv(h)),
				mat(p+"attn_output.weight", h, s.Heads*hd, inv(h)),
			)
		case '-':
			ts = append(ts,
				mat(p+"ffn_up.weight", s.FF, h, inv(h)),
				mat(p+"ffn_down.weight", h, s.FF, inv(s.FF)),
			)
		}
		switch {
		case s.Arch == "granitehybrid" && s.Experts > 0:
			E, eff := uint64(s.Experts), uint64(s.ExpertFF)
			ts = append(ts,
				vec(p+"ffn_norm.weight", ones(h)),
				mat(p+"ffn_gate_inp.weight", s.Experts, h, 4*inv(h)), // routing that depends on the token
				hybridTensor{name: p + "ffn_gate_exps.weight", dims: []uint64{uint64(h), eff, E}, vals: normal(s.Experts*s.ExpertFF*h, inv(h)), mat: true},
				hybridTensor{name: p + "ffn_up_exps.weight", dims: []uint64{uint64(h), eff, E}, vals: normal(s.Experts*s.ExpertFF*h, inv(h)), mat: true},
				hybridTensor{name: p + "ffn_down_exps.weight", dims: []uint64{eff, uint64(h), E}, vals: normal(s.Experts*s.ExpertFF*h, inv(s.ExpertFF)), mat: true},
				mat(p+"ffn_gate_shexp.weight", s.FF, h, inv(h)),
				mat(p+"ffn_up_shexp.weight", s.FF, h, inv(h)),
				mat(p+"ffn_down_shexp.weight", h, s.FF, inv(s.FF)),
			)
		case s.Arch == "granitehybrid":
			ts = append(ts,
				vec(p+"ffn_norm.weight", ones(h)),
				mat(p+"ffn_gate.weight", s.FF, h, inv(h)),
				mat(p+"ffn_up.weight", s.FF, h, inv(h)),
				mat(p+"ffn_down.weight", h, s.FF, inv(s.FF)),
			)
		}
	}
	return append(ts, vec("output_norm.weight", ones(h)), mat("output.weight", s.Vocab, h, inv(h)))
}
