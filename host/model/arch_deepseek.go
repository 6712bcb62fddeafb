package model

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/rotary"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/model/hf"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// MLAConfig is DeepSeek-V2/V3's multi-head latent attention (names and
// numerics in docs/architectures/deepseek2.md). The Config around it has
// KVHeads 1, HeadDim NopeDim+RopeDim (a query head) and a Rope rotating the
// last RopeDim elements of each query head (RotOffset NopeDim).
//
// Each layer keeps one latent row per token, KVLoraRank+RopeDim elements:
// the normed compressed c_kv, whose first KVLoraRank elements are also the
// values, then the rotated key shared by every head. Attention runs in the
// absorbed form for prefill and decode alike: the key up-projection is
// folded into each query head ([W_UKᵀ·q_nope | q_rope] against the latent
// rows) and the value up-projection applied to the attention output over
// the latent, so the pool holds the latent row and nothing else.
type MLAConfig struct {
	QLoraRank  int `json:"q_lora_rank,omitempty"` // 0: q projected directly (V2-Lite)
	KVLoraRank int `json:"kv_lora_rank"`
	NopeDim    int `json:"qk_nope_head_dim"`
	RopeDim    int `json:"qk_rope_head_dim"`
	VHeadDim   int `json:"v_head_dim"`
	// MTPLayers are V3's multi-token-prediction layers past Config.Layers:
	// described by the config, never run (their tensors are not loaded).
	MTPLayers int `json:"mtp_layers,omitempty"`
	// FusedKVB: the file holds kv_b fused (older GGUF conversions, every
	// Hugging Face checkpoint), split and transposed at load; else the
	// split attn_k_b/attn_v_b as stored.
	FusedKVB bool `json:"fused_kv_b,omitempty"`
}

// validate names the first field out of range.
func (a *MLAConfig) validate(c Config) error {
	for _, f := range []struct {
		name   string
		v, min int
	}{{"q_lora_rank", a.QLoraRank, 0}, {"kv_lora_rank", a.KVLoraRank, 1}, {"qk_nope_head_dim", a.NopeDim, 1},
		{"qk_rope_head_dim", a.RopeDim, 2}, {"v_head_dim", a.VHeadDim, 1}, {"num_nextn_predict_layers", a.MTPLayers, 0}} {
		if f.v < f.min || f.v > 1<<16 {
			return fmt.Errorf("model: %s = %d is out of range [%d, %d]", f.name, f.v, f.min, 1<<16)
		}
	}
	switch {
	case a.RopeDim%2 != 0:
		return fmt.Errorf("model: qk_rope_head_dim = %d must be even", a.RopeDim)
	case c.KVHeads != 1:
		return fmt.Errorf("model: MLA keeps one latent row: num_kv_heads = %d, want 1", c.KVHeads)
	case c.HeadDim != a.NopeDim+a.RopeDim:
		return fmt.Errorf("model: MLA head_dim = %d, want qk_nope_head_dim + qk_rope_head_dim = %d", c.HeadDim, a.NopeDim+a.RopeDim)
	case c.Rope.RotDim != a.RopeDim || c.Rope.RotOffset != a.NopeDim || c.Rope.Neox:
		return fmt.Errorf("model: MLA rope rotates %d dims at %d (neox %v), want qk_rope_head_dim %d at qk_nope_head_dim %d, interleaved",
			c.Rope.RotDim, c.Rope.RotOffset, c.Rope.Neox, a.RopeDim, a.NopeDim)
	}
	return nil
}

// LatentRow is the latent cache row of one token in one layer.
func (a *MLAConfig) LatentRow() int { return a.KVLoraRank + a.RopeDim }

// kvRope is the rotation of the shared rope key: the last RopeDim
// elements of kv_a's output row (one head of LatentRow elements).
func (c Config) kvRope() device.RopeSpec {
	s := c.Rope
	s.HeadDim, s.RotOffset = c.mla().LatentRow(), c.mla().KVLoraRank
	return s
}

// mlaScale is the attention scale: DeepSeek's YaRN correction over
// sqrt(qk_nope + qk_rope).
func (c Config) mlaScale() float32 {
	return float32(rotary.SoftmaxScale(c.Rope) / math.Sqrt(float64(c.HeadDim)))
}

// mlaNeeds are an MLA model's cache needs (one latent row per layer, the
// values its first KVLoraRank elements) and mlaShape its attention shape.
func mlaNeeds(c Config) []kv.LayerNeed {
	a, out := c.mla(), make([]kv.LayerNeed, c.Layers)
	for i := range out {
		out[i] = kv.LayerNeed{KVHeads: 1, HeadDim: a.LatentRow(), VHeadDim: a.KVLoraRank, Latent: true}
	}
	return out
}

func (c Config) mlaShape() device.AttnShape {
	return device.AttnShape{Heads: c.Heads, KVHeads: 1, HeadDim: c.mla().LatentRow(), VHeadDim: c.mla().KVLoraRank}
}

// params is one MLA attention block's parameters.
func (a *MLAConfig) params(c Config) int64 {
	h, H, r := int64(c.Hidden), int64(c.Heads), int64(a.KVLoraRank)
	qr := H * int64(c.HeadDim)
	n := h*int64(a.LatentRow()) + r + H*int64(a.NopeDim+a.VHeadDim)*r + H*int64(a.VHeadDim)*h
	if a.QLoraRank > 0 {
		return n + h*int64(a.QLoraRank) + int64(a.QLoraRank) + int64(a.QLoraRank)*qr
	}
	return n + h*qr
}

// deepseekFromGGUF reads a deepseek2 header: the common keys, the MLA
// ranks and the experts.
func deepseekFromGGUF(g ggufMeta) (Config, error) {
	cfg, err := g.common(false)
	if err != nil {
		return Config{}, err
	}
	if err := deepseekGGUF(g, &cfg); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func deepseekGGUF(g ggufMeta, c *Config) error {
	a, p := &MLAConfig{}, "deepseek2."
	var err error
	if a.QLoraRank, err = g.int(p+"attention.q_lora_rank", 0, false); err != nil {
		return err
	}
	if a.KVLoraRank, err = g.int(p+"attention.kv_lora_rank", 0, true); err != nil {
		return err
	}
	if a.RopeDim, err = g.int(p+"rope.dimension_count", 0, true); err != nil {
		return err
	}
	// Newer converters write the latent row as key_length/value_length and
	// the per-head dims as *_mla; older files only the per-head dims.
	kl, err := g.int(p+"attention.key_length", 0, true)
	if err != nil {
		return err
	}
	vl, err := g.int(p+"attention.value_length", 0, true)
	if err != nil {
		return err
	}
	if kl, err = g.int(p+"attention.key_length_mla", kl, false); err != nil {
		return err
	}
	if vl, err = g.int(p+"attention.value_length_mla", vl, false); err != nil {
		return err
	}
	a.NopeDim, a.VHeadDim = kl-a.RopeDim, vl
	if a.NopeDim <= 0 {
		return fmt.Errorf("model: %s: %sattention.key_length %d leaves no room beside the rope dimension %d", g.f.Path, p, kl, a.RopeDim)
	}
	if a.MTPLayers, err = g.int(p+"nextn_predict_layers", 0, false); err != nil {
		return err
	}
	c.KVHeads, c.HeadDim = 1, kl
	c.Rope.HeadDim, c.Rope.RotOffset, c.Rope.Neox = kl, a.NopeDim, false
	if _, _, err := g.f.Tensor("blk.0.attn_k_b.weight"); err != nil {
		a.FusedKVB = true
	}
	e, err := moeFromGGUF(g, p, false, *c)
	if err != nil {
		return err
	}
	if _, _, err := g.f.Tensor(fmt.Sprintf("blk.%d.exp_probs_b.bias", e.FirstDense)); err == nil {
		e.SelectionBias = true
	}
	c.Ext = &moeParams{MoE: e, MLA: a}
	return nil
}

// hfMLA is the latent-attention part of a DeepSeek config.json.
type hfMLA struct {
	QLoraRank   *int `json:"q_lora_rank"`
	KVLoraRank  int  `json:"kv_lora_rank"`
	NopeDim     int  `json:"qk_nope_head_dim"`
	RopeDim     int  `json:"qk_rope_head_dim"`
	VHeadDim    int  `json:"v_head_dim"`
	NextN       int  `json:"num_nextn_predict_layers"`
	RopeScaling *struct {
		Type                          string  `json:"type"`
		RopeType                      string  `json:"rope_type"`
		Factor                        float64 `json:"factor"`
		OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings"`
		BetaFast                      float64 `json:"beta_fast"`
		BetaSlow                      float64 `json:"beta_slow"`
		Mscale                        float64 `json:"mscale"`
		MscaleAllDim                  float64 `json:"mscale_all_dim"`
	} `json:"rope_scaling"`
}

// deepseekFromHF reads a DeepSeek config.json: the common fields, the
// MLA ranks, DeepSeek's YaRN and the experts.
func deepseekFromHF(hc hf.Config, raw []byte, path string) (Config, error) {
	c, err := hfCommon(hc, path)
	if err != nil {
		return Config{}, err
	}
	mt := hc.ModelType
	if mt == "" {
		mt = "deepseek_v3"
		if len(hc.Architectures) > 0 && hc.Architectures[0] == "DeepseekV2ForCausalLM" {
			mt = "deepseek_v2"
		}
	}
	if err := deepseekHF(raw, mt, path, &c); err != nil {
		return Config{}, err
	}
	return c, nil
}

func deepseekHF(raw []byte, mt, path string, c *Config) error {
	var h hfMLA
	if err := json.Unmarshal(raw, &h); err != nil {
		return fmt.Errorf("model: %s: %w", path, err)
	}
	a := &MLAConfig{KVLoraRank: h.KVLoraRank, NopeDim: h.NopeDim, RopeDim: h.RopeDim, VHeadDim: h.VHeadDim, MTPLayers: h.NextN, FusedKVB: true}
	if h.QLoraRank != nil {
		a.QLoraRank = *h.QLoraRank
	}
	c.KVHeads, c.HeadDim = 1, a.NopeDim+a.RopeDim
	c.Rope = device.RopeSpec{HeadDim: c.HeadDim, RotDim: a.RopeDim, RotOffset: a.NopeDim, Theta: c.Rope.Theta}
	if rs := h.RopeScaling; rs != nil {
		t := rs.RopeType
		if t == "" {
			t = rs.Type
		}
		switch t {
		case "", "default":
		case "yarn", "deepseek_yarn":
			c.Rope.Scaling, c.Rope.Factor, c.Rope.OriginalMaxPos = "deepseek_yarn", rs.Factor, rs.OriginalMaxPositionEmbeddings
			c.Rope.BetaFast, c.Rope.BetaSlow, c.Rope.Mscale, c.Rope.MscaleAllDim = rs.BetaFast, rs.BetaSlow, rs.Mscale, rs.MscaleAllDim
		default:
			return fmt.Errorf("model: %s: rope_scaling type %q is not supported for %s (yarn)", path, t, mt)
		}
	}
	e, err := moeFromHF(raw, mt, path)
	c.Ext = &moeParams{MoE: e, MLA: a}
	return err
}

func init() {
	register(&Arch{
		Name: "deepseek2", HF: []string{"DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM"},
		FromGGUF: deepseekFromGGUF,
		FromHF:   deepseekFromHF,
		HFTensor: moeHFName,
		ConfigJSON: func(c Config, out map[string]any) {
			a, e := c.mla(), c.moe()
			out["kv_lora_rank"], out["qk_rope_head_dim"], out["qk_nope_head_dim"], out["v_head_dim"] = a.KVLoraRank, a.RopeDim, a.NopeDim, a.VHeadDim
			out["q_lora_rank"] = nil
			if a.QLoraRank > 0 {
				out["q_lora_rank"] = a.QLoraRank
			}
			out["n_routed_experts"], out["num_experts_per_tok"], out["moe_intermediate_size"] = e.Router.Experts, e.Router.TopK, e.Intermediate
			out["first_k_dense_replace"], out["n_shared_experts"] = e.FirstDense, e.Shared/max(e.Intermediate, 1)
		},
		Layers:  deepseekLayers,
		KVNeeds: mlaNeeds,
		Params:  func(c Config) int64 { return moeParamsOf(c, c.mla().params(c)) },
	})
}

var _ Mixer = (*mlaMixer)(nil)

// mlaMixer is one layer's latent attention in the absorbed form (MLAConfig).
// kb stacks W_UKᵀ per head (Rows heads × kv_lora_rank, Cols qk_nope), vb
// W_UV per head (Rows heads × v_head_dim, Cols kv_lora_rank): one MatMul
// per head each.
type mlaMixer struct {
	norm                 device.Weight
	wq, wqa, qaNorm, wqb device.Weight
	wkva, kvaNorm        device.Weight
	kb, vb, wo           device.Weight
	rope, kvRope         device.Rope
	a                    *MLAConfig
	heads                int
	eps                  float32
	opts                 device.AttnOpts
	idx                  *mlaIndex // shared by the model's layers
}

// deepseekLayers loads every layer's latent attention and its FFN (dense
// for the first first_k_dense_replace layers, experts after).
func deepseekLayers(b *Builder) ([]Layer, error) {
	c := b.C
	a := c.mla()
	rope, err := b.Rope(c.Rope)
	if err != nil {
		return nil, err
	}
	kvRope, err := b.Rope(c.kvRope())
	if err != nil {
		return nil, err
	}
	b.AttnShape(c.mlaShape())
	idx := &mlaIndex{decode: map[int]*mlaPerm{}}
	H, d, r, qrow := c.Heads, c.Hidden, a.KVLoraRank, c.QRow()
	out := make([]Layer, c.Layers)
	for i := range out {
		p := fmt.Sprintf("blk.%d.", i)
		m := &mlaMixer{rope: rope, kvRope: kvRope, a: a, heads: H, eps: c.RMSEps, opts: device.AttnOpts{Scale: c.mlaScale()}, idx: idx}
		mats := []struct {
			dst        *device.Weight
			name       string
			rows, cols int
			vec        bool
		}{
			{&m.norm, "attn_norm.weight", 1, d, true},
			{&m.wq, "attn_q.weight", qrow, d, false},
			{&m.wqa, "attn_q_a.weight", a.QLoraRank, d, false},
			{&m.qaNorm, "attn_q_a_norm.weight", 1, a.QLoraRank, true},
			{&m.wqb, "attn_q_b.weight", qrow, a.QLoraRank, false},
			{&m.wkva, "attn_kv_a_mqa.weight", a.LatentRow(), d, false},
			{&m.kvaNorm, "attn_kv_a_norm.weight", 1, r, true},
		}
		if a.QLoraRank > 0 {
			mats = append(mats[:1], mats[2:]...)
		} else {
			mats = append(mats[:2], mats[5:]...)
		}
		for _, s := range mats {
			if s.vec {
				*s.dst, err = b.Vector(p+s.name, s.cols)
			} else {
				*s.dst, err = b.Matrix(p+s.name, s.rows, s.cols)
			}
			if err != nil {
				return nil, err
			}
		}
		if a.FusedKVB {
			err = b.splitKVB(p+"attn_kv_b.weight", c, m)
		} else if m.kb, err = b.Stacked(p+"attn_k_b.weight", H, r, a.NopeDim); err == nil {
			m.vb, err = b.Stacked(p+"attn_v_b.weight", H, a.VHeadDim, r)
		}
		if err != nil {
			return nil, err
		}
		if m.wo, err = b.Matrix(p+"attn_output.weight", d, H*a.VHeadDim); err != nil {
			return nil, err
		}
		out[i].Mixer = m
		if out[i].FFN, err = ffnOf(b, p, i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// head is rows [i·rows, (i+1)·rows) of a stacked weight as a matrix of its
// own (a view: never freed by itself).
func head(w device.Weight, i, rows int) device.Weight {
	rb, _ := kcpu.DType(w.Type).RowBytes(w.Cols)
	return device.Weight{Ptr: w.Ptr + device.Ptr(int64(i*rows)*int64(rb)), Type: w.Type, Rows: rows, Cols: w.Cols, Bytes: int64(rows) * int64(rb)}
}

// splitKVB reads the fused kv_b ([heads·(nope+v), kv_lora_rank]: per head
// the key rows, then the value rows) and uploads W_UKᵀ and W_UV per head
// in F32, as llama.cpp's converter splits it. Both are listed in the
// model's tensors as F32 values (Vector: their bytes are 4 per value), so
// a plan sizes them as loaded.
func (b *Builder) splitKVB(name string, c Config, m *mlaMixer) error {
	a := c.mla()
	H, r, dn, dv := c.Heads, a.KVLoraRank, a.NopeDim, a.VHeadDim
	b.tensors = append(b.tensors, TensorShape{Name: name + " (k part, f32)", Rows: 1, Cols: H * r * dn, Vector: true},
		TensorShape{Name: name + " (v part, f32)", Rows: 1, Cols: H * dv * r, Vector: true})
	if b.u == nil {
		m.kb, m.vb = b.dryWeight(H*r, dn), b.dryWeight(H*dv, r)
		return nil
	}
	raw, typ, dims, ok, err := b.u.src.tensor(name)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("model: tensor %s is missing", name)
	case len(dims) != 2 || dims[0] != r || dims[1] != H*(dn+dv):
		return fmt.Errorf("model: tensor %s has shape %v, want [%d %d] (row length first)", name, dims, r, H*(dn+dv))
	}
	w := kcpu.Matrix{Type: kcpu.DType(typ), Rows: H * (dn + dv), Cols: r, Data: raw}
	if err := w.Validate(); err != nil {
		return fmt.Errorf("model: tensor %s: %w", name, err)
	}
	kb, vb := make([]float32, H*r*dn), make([]float32, H*dv*r)
	row := make([]float32, r)
	for h := range H {
		for j := range dn + dv {
			kcpu.Dequantize(row, w, h*(dn+dv)+j)
			if j < dn {
				for i, v := range row { // W_UKᵀ: row h·r+i, column j
					kb[(h*r+i)*dn+j] = v
				}
			} else {
				copy(vb[(h*dv+j-dn)*r:], row)
			}
		}
	}
	if m.kb, err = b.u.put(name+" (k part)", floatBytes(kb), device.Weight{Type: device.F32, Rows: H * r, Cols: dn, Bytes: int64(4 * len(kb))}); err != nil {
		return err
	}
	m.vb, err = b.u.put(name+" (v part)", floatBytes(vb), device.Weight{Type: device.F32, Rows: H * dv, Cols: r, Bytes: int64(4 * len(vb))})
	return err
}

func floatBytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		x := math.Float32bits(f)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
	}
	return b
}

// mlaPerm are the row permutations (host index arrays for GatherRows) of
// one row count T: g is the chunk they move (gcd of the latent, nope and
// rope widths); splitKV/joinKV move the latent apart from the rope key and
// back, splitQ/joinQ build the absorbed query, toHeads/toTokens reorder
// [tokens, heads] rows to [heads, tokens] and back.
type mlaPerm struct {
	g                                                 int
	splitKV, joinKV, splitQ, joinQ, toHeads, toTokens []int32
}

// mlaIndex keeps the permutations: one set rebuilt for each eager
// forward's row count, and one per decode batch size, kept, because a
// captured decode graph reads its arrays at every replay.
type mlaIndex struct {
	eager  mlaPerm
	rows   int
	decode map[int]*mlaPerm
}

func (x *mlaIndex) perm(c *Config, T int, decode bool) *mlaPerm {
	if decode {
		p := x.decode[T]
		if p == nil {
			p = &mlaPerm{}
			p.build(c, T)
			x.decode[T] = p
		}
		return p
	}
	if x.rows != T {
		x.eager.build(c, T)
		x.rows = T
	}
	return &x.eager
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// build fills the permutations for T rows, reusing the arrays.
func (s *mlaPerm) build(c *Config, T int) {
	a, H := c.mla(), c.Heads
	r, dn, dr := a.KVLoraRank, a.NopeDim, a.RopeDim
	g := gcd(gcd(r, dn), dr)
	R, N, P := r/g, dn/g, dr/g // chunks per latent, nope and rope part
	s.g = g
	s.splitKV, s.joinKV = s.splitKV[:0], slices.Grow(s.joinKV[:0], T*(R+P))[:T*(R+P)]
	for t := range T {
		for c := range R {
			s.splitKV = append(s.splitKV, int32(t*(R+P)+c))
		}
	}
	for t := range T {
		for c := range P {
			s.splitKV = append(s.splitKV, int32(t*(R+P)+R+c))
		}
	}
	for j, src := range s.splitKV {
		s.joinKV[src] = int32(j)
	}
	// splitQ: [q_nope heads-major (H, T, dn) | q_rope (T, H, dr)] from q
	// (T, H, dn+dr); joinQ: the absorbed query (T, H, r+dr) from that
	// buffer followed by the absorbed latent queries (H, T, r).
	s.splitQ = s.splitQ[:0]
	for h := range H {
		for t := range T {
			for c := range N {
				s.splitQ = append(s.splitQ, int32((t*H+h)*(N+P)+c))
			}
		}
	}
	for i := range T * H {
		for c := range P {
			s.splitQ = append(s.splitQ, int32(i*(N+P)+N+c))
		}
	}
	s.joinQ = s.joinQ[:0]
	rope, lat := H*T*N, H*T*N+T*H*P
	for t := range T {
		for h := range H {
			for c := range R {
				s.joinQ = append(s.joinQ, int32(lat+(h*T+t)*R+c))
			}
			for c := range P {
				s.joinQ = append(s.joinQ, int32(rope+(t*H+h)*P+c))
			}
		}
	}
	s.toHeads, s.toTokens = s.toHeads[:0], slices.Grow(s.toTokens[:0], T*H)[:T*H]
	for h := range H {
		for t := range T {
			s.toHeads = append(s.toHeads, int32(t*H+h))
		}
	}
	for j, src := range s.toHeads {
		s.toTokens[src] = int32(j)
	}
}

// Mix implements Mixer: the latent row (kv_a's output, its first r
// elements normed, the last dr rotated) is what the cache keeps; the
// query is absorbed per head, attention runs over the latent rows, the
// value up-projection and o_proj follow.
func (m *mlaMixer) Mix(s *Step, x, h device.Buf) error {
	k, a, T := s.K, m.a, s.Rows
	H, r, dn, dr, dv, lr := m.heads, a.KVLoraRank, a.NopeDim, a.RopeDim, a.VHeadDim, a.LatentRow()
	st := m.idx.perm(s.C, T, s.Decode())
	g := st.g
	if err := k.RMSNorm(h, x, m.norm, T, s.C.Hidden, m.eps); err != nil {
		return err
	}
	q, err := s.Buf(T * H * (dn + dr))
	if err != nil {
		return err
	}
	if a.QLoraRank > 0 {
		qa, err := s.Buf(T * a.QLoraRank)
		if err != nil {
			return err
		}
		if err := k.MatMul(qa, h, T, m.wqa); err != nil {
			return err
		}
		if err := k.RMSNorm(qa, qa, m.qaNorm, T, a.QLoraRank, m.eps); err != nil {
			return err
		}
		if err := k.MatMul(q, qa, T, m.wqb); err != nil {
			return err
		}
		s.Free(qa)
	} else if err := k.MatMul(q, h, T, m.wq); err != nil {
		return err
	}
	if err := k.ApplyRope(m.rope, q, T, H, s.Positions); err != nil {
		return err
	}
	ckv, err := s.Buf(T * lr)
	if err != nil {
		return err
	}
	if err := k.MatMul(ckv, h, T, m.wkva); err != nil {
		return err
	}
	tmp, err := s.Buf(T * lr)
	if err != nil {
		return err
	}
	if err := k.GatherRows(tmp, ckv, g, st.splitKV); err != nil {
		return err
	}
	if err := k.RMSNorm(tmp, tmp, m.kvaNorm, T, r, m.eps); err != nil {
		return err
	}
	if err := k.GatherRows(ckv, tmp, g, st.joinKV); err != nil {
		return err
	}
	s.Free(tmp)
	if err := k.ApplyRope(m.kvRope, ckv, T, 1, s.Positions); err != nil {
		return err
	}
	// The absorbed query [W_UKᵀ·q_nope | q_rope] per head.
	b, err := s.Buf(H*T*dn + T*H*dr + H*T*r)
	if err != nil {
		return err
	}
	if err := k.GatherRows(b.Slice(0, H*T*dn+T*H*dr), q, g, st.splitQ); err != nil {
		return err
	}
	s.Free(q)
	for i := range H {
		if err := k.MatMul(b.Slice(H*T*dn+T*H*dr+i*T*r, T*r), b.Slice(i*T*dn, T*dn), T, head(m.kb, i, r)); err != nil {
			return err
		}
	}
	qa, err := s.Buf(T * H * lr)
	if err != nil {
		return err
	}
	if err := k.GatherRows(qa, b, g, st.joinQ); err != nil {
		return err
	}
	s.Free(b)
	att, err := s.Buf(T * H * r)
	if err != nil {
		return err
	}
	if err := s.Attend(att, qa, ckv, device.Buf{}, H, m.opts); err != nil {
		return err
	}
	s.Free(qa)
	s.Free(ckv)
	// The value up-projection per head, then o_proj.
	if b, err = s.Buf(H*T*r + H*T*dv); err != nil {
		return err
	}
	if err := k.GatherRows(b.Slice(0, H*T*r), att, r, st.toHeads); err != nil {
		return err
	}
	s.Free(att)
	for i := range H {
		if err := k.MatMul(b.Slice(H*T*r+i*T*dv, T*dv), b.Slice(i*T*r, T*r), T, head(m.vb, i, dv)); err != nil {
			return err
		}
	}
	o, err := s.Buf(T * H * dv)
	if err != nil {
		return err
	}
	if err := k.GatherRows(o, b.Slice(H*T*r, H*T*dv), dv, st.toTokens); err != nil {
		return err
	}
	s.Free(b)
	if err := k.MatMul(h, o, T, m.wo); err != nil {
		return err
	}
	s.Free(o)
	return k.Add(x, x, h)
}

// Notes are what serve says at startup about parts of the model it does
// not run (DeepSeek-V3's multi-token-prediction layers).
func (c Config) Notes() []string {
	a := c.mla()
	if a == nil || a.MTPLayers == 0 {
		return nil
	}
	return []string{fmt.Sprintf("model: %d multi-token-prediction layer(s) after layer %d (num_nextn_predict_layers) are not loaded or run: decoding makes one token per step",
		a.MTPLayers, c.Layers-1)}
}
