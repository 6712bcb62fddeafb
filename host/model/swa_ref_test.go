package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/model/gguf"
)

// swaRef is an independent float64 forward of the sliding-window family,
// written from the papers' and transformers' formulas (not from kvhost's
// kernels): explicit window mask over the whole history (nothing
// released), soft-capping, sinks, Gemma's sandwich norms and GeGLU,
// gpt-oss's router and clamped SwiGLU, YaRN, MXFP4 decoded from its bit
// layout. Hyper-parameters come from kvhost's parsed Config (its values are
// checked on their own in TestSWAConfigs).
type swaRef struct {
	c      Config
	w      map[string][]float64
	k, v   [][][]float64 // layer, position, row
	invLoc []float64     // local rope's inverse frequencies (nil: global's)
	invGlb []float64
	attnF  float64 // YaRN attention factor on cos/sin
	// q8Experts: the expert matrices are MXFP4, which kvhost (as llama.cpp)
	// multiplies with 8-bit activation blocks: the reference rounds each
	// expert input as the format defines (refQ8).
	q8Experts bool
}

func newSWARef(t *testing.T, path string, c Config) *swaRef {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := &swaRef{c: c, w: map[string][]float64{}, k: make([][][]float64, c.Layers), v: make([][][]float64, c.Layers)}
	for _, ti := range f.Tensors {
		_, raw, err := f.Tensor(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		switch ti.Type {
		case gguf.TypeF32:
			out := make([]float64, len(raw)/4)
			for i := range out {
				out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
			}
			r.w[ti.Name] = out
		case gguf.TypeMXFP4:
			r.w[ti.Name] = refMXFP4(raw)
			r.q8Experts = r.q8Experts || strings.HasSuffix(ti.Name, "_exps.weight")
		default:
			t.Fatalf("reference reads f32 and mxfp4 tensors, %s is %s", ti.Name, ti.Type)
		}
	}
	if _, ok := r.w["output.weight"]; !ok {
		r.w["output.weight"] = r.w["token_embd.weight"]
	}
	r.invGlb, r.attnF = refInvFreq(c.Rope.Theta, c.HeadDim, c.Rope.Scaling, c.Rope.Factor, c.Rope.OriginalMaxPos, c.Rope.BetaFast, c.Rope.BetaSlow, !c.Rope.NoTruncate)
	if lr := SWAOf(c).LocalRope; lr != nil {
		r.invLoc, _ = refInvFreq(lr.Theta, c.HeadDim, "", 0, 0, 0, 0, false)
	}
	return r
}

// refMXFP4 decodes GGML MXFP4 blocks: byte 0 the E8M0 exponent (2^(e−127)),
// then 16 bytes whose low nibbles are elements 0..15 and high nibbles
// 16..31, each a sign bit and an E2M1 magnitude.
func refMXFP4(raw []byte) []float64 {
	mag := [8]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	out := make([]float64, 0, len(raw)/17*32)
	for b := 0; b+17 <= len(raw); b += 17 {
		scale := math.Ldexp(1, int(raw[b])-127)
		var blk [32]float64
		for j := 0; j < 16; j++ {
			for half, nib := range []byte{raw[b+1+j] & 15, raw[b+1+j] >> 4} {
				v := mag[nib&7] * scale
				if nib&8 != 0 {
					v = -v
				}
				blk[j+16*half] = v
			}
		}
		out = append(out, blk[:]...)
	}
	return out
}

// refQ8 rounds activations as GGML's quantize_row_q8_1 defines for a
// 4-bit weight's dot product, in float32: per 32 values d = max|x|/127,
// q = round-half-even(x·(1/d)), the value d·q.
func refQ8(x []float64) []float64 {
	out := make([]float64, len(x))
	for b := 0; b < len(x); b += 32 {
		var amax float32
		for _, v := range x[b : b+32] {
			amax = max(amax, float32(math.Abs(v)))
		}
		d := amax / 127
		if d == 0 {
			continue
		}
		id := 1 / d
		for i, v := range x[b : b+32] {
			out[b+i] = float64(d) * math.RoundToEven(float64(float32(v)*id))
		}
	}
	return out
}

// refInvFreq is the rotary inverse frequencies of a head of hd: base^(−2i/hd),
// divided by factor for linear scaling, or transformers' YaRN ramp
// (_compute_yarn_parameters) and its attention factor 0.1·ln(factor) + 1.
func refInvFreq(base float64, hd int, scaling string, factor float64, origMax int, fast, slow float64, truncate bool) ([]float64, float64) {
	inv := make([]float64, hd/2)
	for i := range inv {
		inv[i] = math.Pow(base, -float64(2*i)/float64(hd))
	}
	switch scaling {
	case "linear":
		for i := range inv {
			inv[i] /= factor
		}
	case "yarn":
		if fast == 0 {
			fast = 32
		}
		if slow == 0 {
			slow = 1
		}
		corr := func(rot float64) float64 {
			return float64(hd) * math.Log(float64(origMax)/(rot*2*math.Pi)) / (2 * math.Log(base))
		}
		lo, hi := corr(fast), corr(slow)
		if truncate {
			lo, hi = math.Floor(lo), math.Ceil(hi)
		}
		lo, hi = math.Max(lo, 0), math.Min(hi, float64(hd-1))
		if lo == hi {
			hi += 0.001
		}
		for i := range inv {
			ramp := math.Min(math.Max((float64(i)-lo)/(hi-lo), 0), 1)
			extra := 1 - ramp
			inv[i] = inv[i]/factor*(1-extra) + inv[i]*extra
		}
		return inv, 0.1*math.Log(factor) + 1
	}
	return inv, 1
}

// rope rotates each head of v: pairs (i, i+hd/2) (neox: HF's rotate-half)
// or (2i, 2i+1) (llama.cpp's permuted Llama/Mistral q and k).
func (r *swaRef) rope(v []float64, heads, pos int, inv []float64, af float64) {
	hd := len(v) / heads
	for h := 0; h < heads; h++ {
		for i := 0; i < hd/2; i++ {
			a := float64(pos) * inv[i]
			c, s := math.Cos(a)*af, math.Sin(a)*af
			j0, j1 := h*hd+i, h*hd+i+hd/2
			if !r.c.Rope.Neox {
				j0, j1 = h*hd+2*i, h*hd+2*i+1
			}
			x0, x1 := v[j0], v[j1]
			v[j0], v[j1] = x0*c-x1*s, x0*s+x1*c
		}
	}
}

// step consumes one token at the next position and returns its logits.
func (r *swaRef) step(tok int32) []float64 {
	c, s := r.c, SWAOf(r.c)
	pos, hd := len(r.k[0]), c.HeadDim
	eps := float64(c.RMSEps)
	x := append([]float64(nil), r.w["token_embd.weight"][int(tok)*c.Hidden:(int(tok)+1)*c.Hidden]...)
	if s.Gemma {
		for i := range x {
			x[i] *= float64(float32(math.Sqrt(float64(c.Hidden))))
		}
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		h := rmsnorm(x, r.w[p+"attn_norm.weight"], eps)
		q := matvec(r.w[p+"attn_q.weight"], h, c.Heads*hd)
		k := matvec(r.w[p+"attn_k.weight"], h, c.KVHeads*hd)
		v := matvec(r.w[p+"attn_v.weight"], h, c.KVHeads*hd)
		if b, ok := r.w[p+"attn_q.bias"]; ok {
			addTo(q, b)
			addTo(k, r.w[p+"attn_k.bias"])
			addTo(v, r.w[p+"attn_v.bias"])
		}
		if qn, ok := r.w[p+"attn_q_norm.weight"]; ok {
			for hh := 0; hh < c.Heads; hh++ {
				copy(q[hh*hd:(hh+1)*hd], rmsnorm(q[hh*hd:(hh+1)*hd], qn, eps))
			}
			for hh := 0; hh < c.KVHeads; hh++ {
				copy(k[hh*hd:(hh+1)*hd], rmsnorm(k[hh*hd:(hh+1)*hd], r.w[p+"attn_k_norm.weight"], eps))
			}
		}
		sliding := s.Sliding[l]
		inv, af := r.invGlb, r.attnF
		if sliding && r.invLoc != nil {
			inv, af = r.invLoc, 1
		}
		r.rope(q, c.Heads, pos, inv, af)
		r.rope(k, c.KVHeads, pos, inv, af)
		r.k[l], r.v[l] = append(r.k[l], k), append(r.v[l], v)
		first := 0
		if sliding {
			first = max(0, pos-s.Window+1)
		}
		scale := 1 / math.Sqrt(float64(hd))
		if s.AttnScale > 0 {
			scale = float64(s.AttnScale)
		}
		att := make([]float64, c.Heads*hd)
		sinks := r.w[p+"attn_sinks.weight"]
		for head := 0; head < c.Heads; head++ {
			kvh := head / (c.Heads / c.KVHeads)
			scores := make([]float64, pos+1-first)
			m := math.Inf(-1)
			if sinks != nil {
				m = sinks[head]
			}
			for t := first; t <= pos; t++ {
				var d float64
				for i := 0; i < hd; i++ {
					d += q[head*hd+i] * r.k[l][t][kvh*hd+i]
				}
				d *= scale
				if s.AttnSoftCap > 0 {
					d = float64(s.AttnSoftCap) * math.Tanh(d/float64(s.AttnSoftCap))
				}
				scores[t-first] = d
				m = math.Max(m, d)
			}
			var sum float64
			if sinks != nil {
				sum = math.Exp(sinks[head] - m)
			}
			for i := range scores {
				scores[i] = math.Exp(scores[i] - m)
				sum += scores[i]
			}
			for t := first; t <= pos; t++ {
				for i := 0; i < hd; i++ {
					att[head*hd+i] += scores[t-first] / sum * r.v[l][t][kvh*hd+i]
				}
			}
		}
		o := matvec(r.w[p+"attn_output.weight"], att, c.Hidden)
		if b, ok := r.w[p+"attn_output.bias"]; ok {
			addTo(o, b)
		}
		if s.Gemma {
			o = rmsnorm(o, r.w[p+"post_attention_norm.weight"], eps)
		}
		addTo(x, o)
		switch {
		case s.MoE != nil:
			addTo(x, r.experts(p, rmsnorm(x, r.w[p+"post_attention_norm.weight"], eps)))
		case s.Gemma:
			h = rmsnorm(x, r.w[p+"ffn_norm.weight"], eps)
			g := matvec(r.w[p+"ffn_gate.weight"], h, c.Intermediate)
			u := matvec(r.w[p+"ffn_up.weight"], h, c.Intermediate)
			for i := range g {
				a := g[i]
				g[i] = 0.5 * a * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(a+0.044715*a*a*a))) * u[i]
			}
			addTo(x, rmsnorm(matvec(r.w[p+"ffn_down.weight"], g, c.Hidden), r.w[p+"post_ffw_norm.weight"], eps))
		default:
			h = rmsnorm(x, r.w[p+"ffn_norm.weight"], eps)
			g := matvec(r.w[p+"ffn_gate.weight"], h, c.Intermediate)
			u := matvec(r.w[p+"ffn_up.weight"], h, c.Intermediate)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			addTo(x, matvec(r.w[p+"ffn_down.weight"], g, c.Hidden))
		}
	}
	logits := matvec(r.w["output.weight"], rmsnorm(x, r.w["output_norm.weight"], eps), c.Vocab)
	if fc := float64(s.FinalSoftCap); fc > 0 {
		for i := range logits {
			logits[i] = fc * math.Tanh(logits[i]/fc)
		}
	}
	return logits
}

// experts is gpt-oss's MoE of h: top-K router logits (ties to the lower
// index), softmax over them, each expert's clamped SwiGLU with biases.
func (r *swaRef) experts(p string, h []float64) []float64 {
	c, m := r.c, SWAOf(r.c).MoE
	d, f := c.Hidden, c.Intermediate
	logits := matvec(r.w[p+"ffn_gate_inp.weight"], h, m.Experts)
	addTo(logits, r.w[p+"ffn_gate_inp.bias"])
	idx := make([]int, m.Experts)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return logits[idx[a]] > logits[idx[b]] })
	idx = idx[:m.TopK]
	var z float64
	wts := make([]float64, m.TopK)
	for j, e := range idx {
		wts[j] = math.Exp(logits[e] - logits[idx[0]])
		z += wts[j]
	}
	out := make([]float64, d)
	lim, alpha := float64(m.Limit), float64(m.Alpha)
	q8 := func(x []float64) []float64 {
		if r.q8Experts {
			return refQ8(x)
		}
		return x
	}
	hq := q8(h)
	for j, e := range idx {
		slice := func(name string, rows, cols int) []float64 { return r.w[p+name][e*rows*cols : (e+1)*rows*cols] }
		g := matvec(slice("ffn_gate_exps.weight", f, d), hq, f)
		u := matvec(slice("ffn_up_exps.weight", f, d), hq, f)
		addTo(g, r.w[p+"ffn_gate_exps.bias"][e*f:(e+1)*f])
		addTo(u, r.w[p+"ffn_up_exps.bias"][e*f:(e+1)*f])
		for i := range g {
			gg := math.Min(g[i], lim)
			uu := math.Min(math.Max(u[i], -lim), lim)
			g[i] = gg / (1 + math.Exp(-alpha*gg)) * (uu + 1)
		}
		y := matvec(slice("ffn_down_exps.weight", d, f), q8(g), d)
		addTo(y, r.w[p+"ffn_down_exps.bias"][e*d:(e+1)*d])
		for i := range out {
			out[i] += wts[j] / z * y[i]
		}
	}
	return out
}
