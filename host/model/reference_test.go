package model

import (
	"encoding/binary"
	"fmt"
	"github.com/kvhost/kvhost/internal/testmodels"
	"math"
	"testing"

	"github.com/kvhost/kvhost/host/model/gguf"
)

// refModel is an independent float64 forward of a Llama GGUF: no paging, no
// batching, no kernels from this repository — every weight read straight
// from the file's F32 bytes and every operation spelled out.
type refModel struct {
	dim, hidden, layers, heads, kvHeads, vocab int
	eps, theta                                 float64
	neox, bias, qkNorm                         bool
	w                                          map[string][]float64
	kcache, vcache                             [][][]float64 // layer, pos, kv row
	// trunk transforms (model.Trunk); zero: off
	embScale, logitScale, softCap float64
}

func readF32Tensor(t *testing.T, f *gguf.File, name string) []float64 {
	t.Helper()
	ti, raw, err := f.Tensor(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if ti.Type != gguf.TypeF32 {
		t.Fatalf("reference reads only f32 tensors, %s is %s", name, ti.Type)
	}
	out := make([]float64, len(raw)/4)
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
	}
	return out
}

func newRefModel(t *testing.T, path string) *refModel {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	geti := func(k string) int {
		v, ok := f.Get(k)
		if !ok {
			t.Fatalf("missing %s", k)
		}
		n, _ := v.Uint()
		return int(n)
	}
	getf := func(k string, def float64) float64 {
		if v, ok := f.Get(k); ok {
			x, _ := v.Float()
			return x
		}
		return def
	}
	r := &refModel{
		dim: geti("llama.embedding_length"), hidden: geti("llama.feed_forward_length"), layers: geti("llama.block_count"),
		heads: geti("llama.attention.head_count"), kvHeads: geti("llama.attention.head_count_kv"),
		eps: getf("llama.attention.layer_norm_rms_epsilon", 1e-5), theta: getf("llama.rope.freq_base", 10000),
		w: map[string][]float64{},
	}
	for _, ti := range f.Tensors {
		r.w[ti.Name] = readF32Tensor(t, f, ti.Name)
	}
	r.vocab = len(r.w["token_embd.weight"]) / r.dim
	if _, ok := r.w["output.weight"]; !ok {
		r.w["output.weight"] = r.w["token_embd.weight"]
	}
	r.kcache = make([][][]float64, r.layers)
	r.vcache = make([][][]float64, r.layers)
	return r
}

func rmsnorm(x, w []float64, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	s := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i := range x {
		out[i] = x[i] * s * w[i]
	}
	return out
}

// matvec: W is [rows][cols] row-major (GGUF ne0 = cols).
func matvec(w []float64, x []float64, rows int) []float64 {
	cols := len(x)
	out := make([]float64, rows)
	for r := 0; r < rows; r++ {
		var s float64
		for c := 0; c < cols; c++ {
			s += w[r*cols+c] * x[c]
		}
		out[r] = s
	}
	return out
}

func (r *refModel) rope(v []float64, nHeads, pos int) {
	hd := len(v) / nHeads
	for h := 0; h < nHeads; h++ {
		for i := 0; i < hd/2; i++ {
			freq := math.Pow(r.theta, -float64(2*i)/float64(hd))
			a := float64(pos) * freq
			c, s := math.Cos(a), math.Sin(a)
			j0, j1 := h*hd+2*i, h*hd+2*i+1
			if r.neox {
				j0, j1 = h*hd+i, h*hd+i+hd/2
			}
			x0, x1 := v[j0], v[j1]
			v[j0], v[j1] = x0*c-x1*s, x0*s+x1*c
		}
	}
}

// step consumes one token at the next position and returns its logits.
func (r *refModel) step(tok int32) []float64 {
	out := matvec(r.w["output.weight"], r.stepHidden(tok), r.vocab)
	for i := range out {
		if r.logitScale != 0 {
			out[i] *= r.logitScale
		}
		if r.softCap > 0 {
			out[i] = r.softCap * math.Tanh(out[i]/r.softCap)
		}
	}
	return out
}

// stepHidden consumes one token at the next position and returns its final
// hidden state (after the output norm).
func (r *refModel) stepHidden(tok int32) []float64 {
	pos := len(r.kcache[0])
	hd := r.dim / r.heads
	x := append([]float64(nil), r.w["token_embd.weight"][int(tok)*r.dim:(int(tok)+1)*r.dim]...)
	for i := range x {
		if r.embScale != 0 {
			x[i] *= r.embScale
		}
	}
	for l := 0; l < r.layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		h := rmsnorm(x, r.w[p+"attn_norm.weight"], r.eps)
		q := matvec(r.w[p+"attn_q.weight"], h, r.heads*hd)
		k := matvec(r.w[p+"attn_k.weight"], h, r.kvHeads*hd)
		v := matvec(r.w[p+"attn_v.weight"], h, r.kvHeads*hd)
		if r.bias {
			for i := range q {
				q[i] += r.w[p+"attn_q.bias"][i]
			}
			for i := range k {
				k[i] += r.w[p+"attn_k.bias"][i]
				v[i] += r.w[p+"attn_v.bias"][i]
			}
		}
		if r.qkNorm {
			// Qwen3: RMSNorm over each head's vector before the rotation.
			for hh := 0; hh < r.heads; hh++ {
				copy(q[hh*hd:(hh+1)*hd], rmsnorm(q[hh*hd:(hh+1)*hd], r.w[p+"attn_q_norm.weight"], r.eps))
			}
			for hh := 0; hh < r.kvHeads; hh++ {
				copy(k[hh*hd:(hh+1)*hd], rmsnorm(k[hh*hd:(hh+1)*hd], r.w[p+"attn_k_norm.weight"], r.eps))
			}
		}
		r.rope(q, r.heads, pos)
		r.rope(k, r.kvHeads, pos)
		r.kcache[l] = append(r.kcache[l], k)
		r.vcache[l] = append(r.vcache[l], v)
		att := make([]float64, r.heads*hd)
		for head := 0; head < r.heads; head++ {
			kvh := head / (r.heads / r.kvHeads)
			scores := make([]float64, pos+1)
			maxS := math.Inf(-1)
			for t := 0; t <= pos; t++ {
				var s float64
				for i := 0; i < hd; i++ {
					s += q[head*hd+i] * r.kcache[l][t][kvh*hd+i]
				}
				scores[t] = s / math.Sqrt(float64(hd))
				maxS = math.Max(maxS, scores[t])
			}
			var sum float64
			for t := range scores {
				scores[t] = math.Exp(scores[t] - maxS)
				sum += scores[t]
			}
			for t := range scores {
				for i := 0; i < hd; i++ {
					att[head*hd+i] += scores[t] / sum * r.vcache[l][t][kvh*hd+i]
				}
			}
		}
		o := matvec(r.w[p+"attn_output.weight"], att, r.dim)
		for i := range x {
			x[i] += o[i]
		}
		h = rmsnorm(x, r.w[p+"ffn_norm.weight"], r.eps)
		g := matvec(r.w[p+"ffn_gate.weight"], h, r.hidden)
		u := matvec(r.w[p+"ffn_up.weight"], h, r.hidden)
		for i := range g {
			g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
		}
		d := matvec(r.w[p+"ffn_down.weight"], g, r.dim)
		for i := range x {
			x[i] += d[i]
		}
	}
	return rmsnorm(x, r.w["output_norm.weight"], r.eps)
}

func argmax64(x []float64) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// storiesPath is the repository's models/stories260K.gguf.
func storiesPath(t testing.TB) string { return testmodels.MustStories260K(t) }
