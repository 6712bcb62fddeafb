package model

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/rotary"
	"github.com/kvhost/kvhost/host/kv"
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
	s.HeadDim, s.RotOffset = c.MLA.LatentRow(), c.MLA.KVLoraRank
	return s
}

// mlaScale is the attention scale: DeepSeek's YaRN correction over
// sqrt(qk_nope + qk_rope).
func (c Config) mlaScale() float32 {
	return float32(rotary.SoftmaxScale(c.Rope) / math.Sqrt(float64(c.HeadDim)))
}

// mlaNeed and mlaShape are an MLA layer's cache need and attention shape:
// one latent row, the values its first KVLoraRank elements.
func (c Config) mlaNeed() kv.LayerNeed {
	return kv.LayerNeed{KVHeads: 1, HeadDim: c.MLA.LatentRow(), VHeadDim: c.MLA.KVLoraRank, Latent: true}
}

func (c Config) mlaShape() device.AttnShape {
	return device.AttnShape{Heads: c.Heads, KVHeads: 1, HeadDim: c.MLA.LatentRow(), VHeadDim: c.MLA.KVLoraRank}
}

// mlaParams is one MLA attention block's parameters.
func (a *MLAConfig) params(c Config) int64 {
	h, H, r := int64(c.Hidden), int64(c.Heads), int64(a.KVLoraRank)
	qr := H * int64(c.HeadDim)
	n := h*int64(a.LatentRow()) + r + H*int64(a.NopeDim+a.VHeadDim)*r + H*int64(a.VHeadDim)*h
	if a.QLoraRank > 0 {
		return n + h*int64(a.QLoraRank) + int64(a.QLoraRank) + int64(a.QLoraRank)*qr
	}
	return n + h*qr
}

// deepseekFromGGUF fills the MLA and MoE parts of a deepseek2 header.
func deepseekFromGGUF(g ggufMeta, c *Config) error {
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
	c.MLA, c.KVHeads, c.HeadDim = a, 1, kl
	c.Rope.HeadDim, c.Rope.RotOffset, c.Rope.Neox = kl, a.NopeDim, false
	if c.MoE, err = moeFromGGUF(g, p, false, *c); err != nil {
		return err
	}
	if _, _, err := g.f.Tensor(fmt.Sprintf("blk.%d.exp_probs_b.bias", c.MoE.FirstDense)); err == nil {
		c.MoE.SelectionBias = true
	}
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

// deepseekFromHF fills the MLA, MoE and rope parts of a DeepSeek config.
func deepseekFromHF(raw []byte, mt, path string, c *Config) error {
	var h hfMLA
	if err := json.Unmarshal(raw, &h); err != nil {
		return fmt.Errorf("model: %s: %w", path, err)
	}
	a := &MLAConfig{KVLoraRank: h.KVLoraRank, NopeDim: h.NopeDim, RopeDim: h.RopeDim, VHeadDim: h.VHeadDim, MTPLayers: h.NextN}
	if h.QLoraRank != nil {
		a.QLoraRank = *h.QLoraRank
	}
	c.MLA, c.KVHeads, c.HeadDim = a, 1, a.NopeDim+a.RopeDim
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
	var err error
	c.MoE, err = moeFromHF(raw, mt, path)
	return err
}

// mlaLayer is one MLA block's weights. kb stacks W_UKᵀ per head (Rows
// heads × kv_lora_rank, Cols qk_nope), vb W_UV per head (Rows heads ×
// v_head_dim, Cols kv_lora_rank): one MatMul per head each.
type mlaLayer struct {
	wq, wqa, qaNorm, wqb device.Weight
	wkva, kvaNorm        device.Weight
	kb, vb, wo           device.Weight
}

func (w *mlaLayer) weights() []device.Weight {
	return []device.Weight{w.wq, w.wqa, w.qaNorm, w.wqb, w.wkva, w.kvaNorm, w.kb, w.vb, w.wo}
}

// head is rows [i·rows, (i+1)·rows) of a stacked weight as a matrix of its
// own (a view: never freed by itself).
func head(w device.Weight, i, rows int) device.Weight {
	rb, _ := kcpu.DType(w.Type).RowBytes(w.Cols)
	return device.Weight{Ptr: w.Ptr + device.Ptr(int64(i*rows)*int64(rb)), Type: w.Type, Rows: rows, Cols: w.Cols, Bytes: int64(rows) * int64(rb)}
}

// loadMLA uploads layer p's attention weights: the split attn_k_b/attn_v_b
// of newer conversions as stored, or the fused attn_kv_b (older GGUF
// files, Hugging Face's kv_b_proj) split and transposed here.
func (u *uploader) loadMLA(p string, c Config) (*mlaLayer, error) {
	a, w := c.MLA, &mlaLayer{}
	H, d, r, qrow := c.Heads, c.Hidden, a.KVLoraRank, c.QRow()
	var err error
	mats := []struct {
		dst        *device.Weight
		name       string
		rows, cols int
		vec        bool
	}{
		{&w.wkva, "attn_kv_a_mqa.weight", a.LatentRow(), d, false},
		{&w.kvaNorm, "attn_kv_a_norm.weight", 1, r, true},
		{&w.wo, "attn_output.weight", d, H * a.VHeadDim, false},
	}
	if a.QLoraRank > 0 {
		mats = append(mats, []struct {
			dst        *device.Weight
			name       string
			rows, cols int
			vec        bool
		}{{&w.wqa, "attn_q_a.weight", a.QLoraRank, d, false}, {&w.qaNorm, "attn_q_a_norm.weight", 1, a.QLoraRank, true},
			{&w.wqb, "attn_q_b.weight", qrow, a.QLoraRank, false}}...)
	} else {
		mats = append(mats, struct {
			dst        *device.Weight
			name       string
			rows, cols int
			vec        bool
		}{&w.wq, "attn_q.weight", qrow, d, false})
	}
	for _, s := range mats {
		if s.vec {
			*s.dst, err = u.vector(p+s.name, s.cols, true)
		} else {
			*s.dst, err = u.matrix(p+s.name, s.rows, s.cols, true)
		}
		if err != nil {
			return nil, err
		}
	}
	if _, _, _, ok, err := u.src.tensor(p + "attn_k_b.weight"); err != nil {
		return nil, err
	} else if ok {
		if w.kb, err = u.stacked(p+"attn_k_b.weight", H, r, a.NopeDim); err != nil {
			return nil, err
		}
		if w.vb, err = u.stacked(p+"attn_v_b.weight", H, a.VHeadDim, r); err != nil {
			return nil, err
		}
		return w, nil
	}
	return w, u.splitKVB(p+"attn_kv_b.weight", c, w)
}

// splitKVB reads the fused kv_b ([heads·(nope+v), kv_lora_rank]: per head
// the key rows, then the value rows) and uploads W_UKᵀ and W_UV per head
// in F32, as llama.cpp's converter splits it.
func (u *uploader) splitKVB(name string, c Config, w *mlaLayer) error {
	a := c.MLA
	H, r, dn, dv := c.Heads, a.KVLoraRank, a.NopeDim, a.VHeadDim
	raw, typ, dims, ok, err := u.src.tensor(name)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("model: tensor %s is missing (and no attn_k_b/attn_v_b split form either)", name)
	case len(dims) != 2 || dims[0] != r || dims[1] != H*(dn+dv):
		return fmt.Errorf("model: tensor %s has shape %v, want [%d %d] (row length first)", name, dims, r, H*(dn+dv))
	}
	m := kcpu.Matrix{Type: kcpu.DType(typ), Rows: H * (dn + dv), Cols: r, Data: raw}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("model: tensor %s: %w", name, err)
	}
	kb, vb := make([]float32, H*r*dn), make([]float32, H*dv*r)
	row := make([]float32, r)
	for h := range H {
		for j := range dn + dv {
			kcpu.Dequantize(row, m, h*(dn+dv)+j)
			if j < dn {
				for i, v := range row { // W_UKᵀ: row h·r+i, column j
					kb[(h*r+i)*dn+j] = v
				}
			} else {
				copy(vb[(h*dv+j-dn)*r:], row)
			}
		}
	}
	if w.kb, err = u.put(name+" (k part)", floatBytes(kb), device.Weight{Type: device.F32, Rows: H * r, Cols: dn, Bytes: int64(4 * len(kb))}); err != nil {
		return err
	}
	w.vb, err = u.put(name+" (v part)", floatBytes(vb), device.Weight{Type: device.F32, Rows: H * dv, Cols: r, Bytes: int64(4 * len(vb))})
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

// mlaState is the model-wide part of MLA: the shared key's rope and the
// row permutations of the current forward's row count (host index arrays
// for GatherRows, rebuilt when the count changes).
type mlaState struct {
	kvRope device.Rope
	rows   int
	// g is the chunk the permutations move (gcd of the latent, nope and
	// rope widths); splitKV/joinKV move the latent apart from the rope key
	// and back, splitQ/joinQ build the absorbed query, toHeads/toTokens
	// reorder [tokens, heads] rows to [heads, tokens] and back.
	g                                       int
	splitKV, joinKV, splitQ, joinQ, toHeads []int32
	toTokens                                []int32
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// index builds the permutations for T rows.
func (s *mlaState) index(c Config, T int) {
	if s.rows == T {
		return
	}
	a, H := c.MLA, c.Heads
	r, dn, dr := a.KVLoraRank, a.NopeDim, a.RopeDim
	g := gcd(gcd(r, dn), dr)
	R, N, P := r/g, dn/g, dr/g // chunks per latent, nope and rope part
	s.g, s.rows = g, T
	s.splitKV, s.joinKV = s.splitKV[:0], make([]int32, T*(R+P))
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
	s.toHeads, s.toTokens = s.toHeads[:0], make([]int32, T*H)
	for h := range H {
		for t := range T {
			s.toHeads = append(s.toHeads, int32(t*H+h))
		}
	}
	for j, src := range s.toHeads {
		s.toTokens[src] = int32(j)
	}
}

// mlaBlock is one DeepSeek decoder block over the batch: latent attention
// (absorbed), then the dense MLP or the experts.
func (m *Model) mlaBlock(sc *scope, pools *kv.Set, l int, seqs []Seq, x device.Buf, T int) error {
	c, k, L := m.Config, m.k, &m.layers[l]
	a, w, st := c.MLA, L.mla, m.mla
	H, r, dn, dr, dv, lr := c.Heads, a.KVLoraRank, a.NopeDim, a.RopeDim, a.VHeadDim, a.LatentRow()
	st.index(c, T)
	g := st.g
	h, err := sc.buf(T * c.Hidden)
	if err != nil {
		return err
	}
	if err := k.RMSNorm(h, x, L.attnNorm, T, c.Hidden, c.RMSEps); err != nil {
		return err
	}
	q, err := sc.buf(T * c.QRow())
	if err != nil {
		return err
	}
	if a.QLoraRank > 0 {
		qa, err := sc.buf(T * a.QLoraRank)
		if err != nil {
			return err
		}
		if err := k.MatMul(qa, h, T, w.wqa); err != nil {
			return err
		}
		if err := k.RMSNorm(qa, qa, w.qaNorm, T, a.QLoraRank, c.RMSEps); err != nil {
			return err
		}
		if err := k.MatMul(q, qa, T, w.wqb); err != nil {
			return err
		}
		sc.free(qa)
	} else if err := k.MatMul(q, h, T, w.wq); err != nil {
		return err
	}
	if err := k.ApplyRope(m.rope, q, T, H, m.positions); err != nil {
		return err
	}
	// The latent row: kv_a's output, its first r elements normed, the
	// last dr rotated.
	ckv, err := sc.buf(T * lr)
	if err != nil {
		return err
	}
	if err := k.MatMul(ckv, h, T, w.wkva); err != nil {
		return err
	}
	tmp, err := sc.buf(T * lr)
	if err != nil {
		return err
	}
	if err := k.GatherRows(tmp, ckv, g, st.splitKV); err != nil {
		return err
	}
	if err := k.RMSNorm(tmp, tmp, w.kvaNorm, T, r, c.RMSEps); err != nil {
		return err
	}
	if err := k.GatherRows(ckv, tmp, g, st.joinKV); err != nil {
		return err
	}
	sc.free(tmp)
	if err := k.ApplyRope(st.kvRope, ckv, T, 1, m.positions); err != nil {
		return err
	}
	// The absorbed query [W_UKᵀ·q_nope | q_rope] per head.
	b, err := sc.buf(H*T*dn + T*H*dr + H*T*r)
	if err != nil {
		return err
	}
	if err := k.GatherRows(b.Slice(0, H*T*dn+T*H*dr), q, g, st.splitQ); err != nil {
		return err
	}
	sc.free(q)
	for i := range H {
		lat := b.Slice(H*T*dn+T*H*dr+i*T*r, T*r)
		if err := k.MatMul(lat, b.Slice(i*T*dn, T*dn), T, head(w.kb, i, r)); err != nil {
			return err
		}
	}
	qa, err := sc.buf(T * H * lr)
	if err != nil {
		return err
	}
	if err := k.GatherRows(qa, b, g, st.joinQ); err != nil {
		return err
	}
	sc.free(b)
	att, err := sc.buf(T * H * r)
	if err != nil {
		return err
	}
	kvl, tp := pools.Layer(l), pools.Table(l)
	opts := device.AttnOpts{Scale: c.mlaScale()}
	off := 0
	for _, s := range seqs {
		n := len(s.Tokens)
		if err := k.WriteKV(kvl, ckv.Slice(off*lr, n*lr), device.Buf{}, n, s.Pages[tp], s.Start); err != nil {
			return err
		}
		if err := k.Attention(att.Slice(off*H*r, n*H*r), qa.Slice(off*H*lr, n*H*lr), n, H, kvl, s.Pages[tp], s.Start, opts, m.attnScratch); err != nil {
			return err
		}
		off += n
	}
	sc.free(qa)
	sc.free(ckv)
	// The value up-projection per head, then o_proj.
	b, err = sc.buf(H*T*r + H*T*dv)
	if err != nil {
		return err
	}
	if err := k.GatherRows(b.Slice(0, H*T*r), att, r, st.toHeads); err != nil {
		return err
	}
	sc.free(att)
	for i := range H {
		if err := k.MatMul(b.Slice(H*T*r+i*T*dv, T*dv), b.Slice(i*T*r, T*r), T, head(w.vb, i, dv)); err != nil {
			return err
		}
	}
	o, err := sc.buf(T * H * dv)
	if err != nil {
		return err
	}
	if err := k.GatherRows(o, b.Slice(H*T*r, H*T*dv), dv, st.toTokens); err != nil {
		return err
	}
	sc.free(b)
	if err := k.MatMul(h, o, T, w.wo); err != nil {
		return err
	}
	sc.free(o)
	if err := k.Add(x, x, h); err != nil {
		return err
	}
	return m.ffn(sc, l, x, h, T)
}

// ffn is a block's second half after attention: the post-attention norm,
// then the experts or the dense SwiGLU MLP, added to x; it frees h.
func (m *Model) ffn(sc *scope, l int, x, h device.Buf, rows int) error {
	c, k, L := m.Config, m.k, &m.layers[l]
	defer sc.free(h)
	if err := k.RMSNorm(h, x, L.ffnNorm, rows, c.Hidden, c.RMSEps); err != nil {
		return err
	}
	if L.moe != nil {
		return m.moeFFN(sc, L.moe, x, h, rows)
	}
	if err := m.swiGLU(sc, h, h, rows, c.Intermediate, L.gate, L.up, L.down); err != nil {
		return err
	}
	return k.Add(x, x, h)
}

// Notes are what serve says at startup about parts of the model it does
// not run (DeepSeek-V3's multi-token-prediction layers).
func (c Config) Notes() []string {
	if c.MLA == nil || c.MLA.MTPLayers == 0 {
		return nil
	}
	return []string{fmt.Sprintf("model: %d multi-token-prediction layer(s) after layer %d (num_nextn_predict_layers) are not loaded or run: decoding makes one token per step",
		c.MLA.MTPLayers, c.Layers-1)}
}
