package model

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/synth"
)

// archRef is an independent float64 forward of a generated qwen3moe or
// deepseek2 GGUF: one token at a time, weights read from the file's F32
// bytes, attention in the expanded form (MLA's keys and values rebuilt per
// head from the cached latent rows, never the absorbed query), and every
// expert computed and weighted by the router (zero for the experts it did
// not select) — a dense loop, not the grouped execution.
type archRef struct {
	c Config
	w map[string][]float64
	// per layer, per position: GQA k and v rows, or MLA's normed latent
	// and rotated rope key.
	k, v [][][]float64
}

func newArchRef(t *testing.T, path string) *archRef {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := ConfigFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	r := &archRef{c: c, w: map[string][]float64{}, k: make([][][]float64, c.Layers), v: make([][][]float64, c.Layers)}
	for _, ti := range f.Tensors {
		r.w[ti.Name] = readF32Tensor(t, f, ti.Name)
	}
	return r
}

// ropeRef rotates dims [off, off+rot) of each of the heads of x (head
// width hd) at pos: adjacent pairs, or NeoX halves.
func ropeRef(x []float64, heads, hd, off, rot int, theta float64, neox bool, pos int) {
	for h := range heads {
		b := h*hd + off
		for i := range rot / 2 {
			a := float64(pos) * math.Pow(theta, -float64(2*i)/float64(rot))
			c, s := math.Cos(a), math.Sin(a)
			j0, j1 := b+2*i, b+2*i+1
			if neox {
				j0, j1 = b+i, b+i+rot/2
			}
			x0, x1 := x[j0], x[j1]
			x[j0], x[j1] = x0*c-x1*s, x0*s+x1*c
		}
	}
}

func addTo(x, y []float64) {
	for i := range x {
		x[i] += y[i]
	}
}

func swiGLURef(w []float64, gate, up, down []float64, d, f int) []float64 {
	g, u := matvec(gate, w, f), matvec(up, w, f)
	for i := range g {
		g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
	}
	return matvec(down, g, d)
}

// softmaxAttend returns Σ_t softmax(scores)_t · vals[t].
func softmaxAttend(scores []float64, vals [][]float64) []float64 {
	mx := math.Inf(-1)
	for _, s := range scores {
		mx = math.Max(mx, s)
	}
	var sum float64
	p := make([]float64, len(scores))
	for i, s := range scores {
		p[i] = math.Exp(s - mx)
		sum += p[i]
	}
	out := make([]float64, len(vals[0]))
	for t := range vals {
		for i, v := range vals[t] {
			out[i] += p[t] / sum * v
		}
	}
	return out
}

func (r *archRef) attnGQA(l int, h []float64, pos int) []float64 {
	c, p := r.c, fmt.Sprintf("blk.%d.", l)
	hd := c.HeadDim
	q, k, v := matvec(r.w[p+"attn_q.weight"], h, c.Heads*hd), matvec(r.w[p+"attn_k.weight"], h, c.KVHeads*hd), matvec(r.w[p+"attn_v.weight"], h, c.KVHeads*hd)
	for i := range c.Heads {
		copy(q[i*hd:(i+1)*hd], rmsnorm(q[i*hd:(i+1)*hd], r.w[p+"attn_q_norm.weight"], float64(c.RMSEps)))
	}
	for i := range c.KVHeads {
		copy(k[i*hd:(i+1)*hd], rmsnorm(k[i*hd:(i+1)*hd], r.w[p+"attn_k_norm.weight"], float64(c.RMSEps)))
	}
	ropeRef(q, c.Heads, hd, 0, hd, c.Rope.Theta, true, pos)
	ropeRef(k, c.KVHeads, hd, 0, hd, c.Rope.Theta, true, pos)
	r.k[l], r.v[l] = append(r.k[l], k), append(r.v[l], v)
	att := make([]float64, 0, c.Heads*hd)
	for i := range c.Heads {
		kv := i / (c.Heads / c.KVHeads)
		scores := make([]float64, pos+1)
		vals := make([][]float64, pos+1)
		for t := range scores {
			for j := range hd {
				scores[t] += q[i*hd+j] * r.k[l][t][kv*hd+j]
			}
			scores[t] /= math.Sqrt(float64(hd))
			vals[t] = r.v[l][t][kv*hd : (kv+1)*hd]
		}
		att = append(att, softmaxAttend(scores, vals)...)
	}
	return matvec(r.w[p+"attn_output.weight"], att, c.Hidden)
}

// attnMLA is the expanded form: k_nope and v of every head rebuilt from
// each cached latent row by the up-projections.
func (r *archRef) attnMLA(l int, h []float64, pos int) []float64 {
	c, a, p := r.c, r.c.mla(), fmt.Sprintf("blk.%d.", l)
	H, rk, dn, dr, dv, qk := c.Heads, a.KVLoraRank, a.NopeDim, a.RopeDim, a.VHeadDim, a.NopeDim+a.RopeDim
	var q []float64
	if a.QLoraRank > 0 {
		qa := rmsnorm(matvec(r.w[p+"attn_q_a.weight"], h, a.QLoraRank), r.w[p+"attn_q_a_norm.weight"], float64(c.RMSEps))
		q = matvec(r.w[p+"attn_q_b.weight"], qa, H*qk)
	} else {
		q = matvec(r.w[p+"attn_q.weight"], h, H*qk)
	}
	ropeRef(q, H, qk, dn, dr, c.Rope.Theta, false, pos)
	ckv := matvec(r.w[p+"attn_kv_a_mqa.weight"], h, rk+dr)
	lat := rmsnorm(ckv[:rk], r.w[p+"attn_kv_a_norm.weight"], float64(c.RMSEps))
	kpe := append([]float64(nil), ckv[rk:]...)
	ropeRef(kpe, 1, dr, 0, dr, c.Rope.Theta, false, pos)
	r.k[l], r.v[l] = append(r.k[l], lat), append(r.v[l], kpe)
	kb, vb := r.w[p+"attn_k_b.weight"], r.w[p+"attn_v_b.weight"] // [H][r][dn], [H][dv][r]
	att := make([]float64, 0, H*dv)
	for i := range H {
		scores := make([]float64, pos+1)
		vals := make([][]float64, pos+1)
		for t := range scores {
			lt := r.k[l][t]
			knope, v := make([]float64, dn), make([]float64, dv)
			for j := range dn {
				for x := range rk {
					knope[j] += kb[(i*rk+x)*dn+j] * lt[x]
				}
			}
			for j := range dv {
				for x := range rk {
					v[j] += vb[(i*dv+j)*rk+x] * lt[x]
				}
			}
			var s float64
			for j := range dn {
				s += q[i*qk+j] * knope[j]
			}
			for j := range dr {
				s += q[i*qk+dn+j] * r.v[l][t][j]
			}
			scores[t], vals[t] = s/math.Sqrt(float64(qk)), v
		}
		att = append(att, softmaxAttend(scores, vals)...)
	}
	return matvec(r.w[p+"attn_output.weight"], att, c.Hidden)
}

// route returns every expert's weight for the scores of one token (zero
// for the unselected): softmax or sigmoid scores, group-limited selection
// by the top-2 sums of the biased scores, top-k by biased score, weights
// the unbiased scores, normalised and scaled.
func (r *archRef) route(l int, h []float64) []float64 {
	e, p := r.c.moe(), fmt.Sprintf("blk.%d.", l)
	E := e.Router.Experts
	logits := matvec(r.w[p+"ffn_gate_inp.weight"], h, E)
	score := make([]float64, E)
	if e.Router.Scoring == 1 { // sigmoid
		for i, x := range logits {
			score[i] = 1 / (1 + math.Exp(-x))
		}
	} else {
		mx := math.Inf(-1)
		for _, x := range logits {
			mx = math.Max(mx, x)
		}
		var sum float64
		for i, x := range logits {
			score[i] = math.Exp(x - mx)
			sum += score[i]
		}
		for i := range score {
			score[i] /= sum
		}
	}
	sel := append([]float64(nil), score...)
	if b, ok := r.w[p+"exp_probs_b.bias"]; ok {
		addTo(sel, b)
	}
	allowed := make([]bool, E)
	if G := e.Router.Groups; G > 1 {
		per := E / G
		type gs struct {
			g int
			s float64
		}
		var groups []gs
		for g := range G {
			v := append([]float64(nil), sel[g*per:(g+1)*per]...)
			sort.Sort(sort.Reverse(sort.Float64Slice(v)))
			groups = append(groups, gs{g, v[0] + v[1]})
		}
		sort.SliceStable(groups, func(i, j int) bool { return groups[i].s > groups[j].s })
		for _, g := range groups[:e.Router.TopKGroups] {
			for i := range per {
				allowed[g.g*per+i] = true
			}
		}
	} else {
		for i := range allowed {
			allowed[i] = true
		}
	}
	idx := []int{}
	for i := range E {
		if allowed[i] {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(i, j int) bool { return sel[idx[i]] > sel[idx[j]] })
	w := make([]float64, E)
	var sum float64
	for _, i := range idx[:e.Router.TopK] {
		w[i] = score[i]
		sum += score[i]
	}
	scale := float64(e.Router.Scale)
	if scale == 0 {
		scale = 1
	}
	for i := range w {
		if e.Router.NormTopK {
			w[i] /= sum
		}
		w[i] *= scale
	}
	return w
}

func (r *archRef) ffn(l int, h []float64) []float64 {
	c, p := r.c, fmt.Sprintf("blk.%d.", l)
	if !c.MoELayer(l) {
		return swiGLURef(h, r.w[p+"ffn_gate.weight"], r.w[p+"ffn_up.weight"], r.w[p+"ffn_down.weight"], c.Hidden, c.Intermediate)
	}
	e := c.moe()
	d, f := c.Hidden, e.Intermediate
	out := make([]float64, d)
	if e.Shared > 0 {
		out = swiGLURef(h, r.w[p+"ffn_gate_shexp.weight"], r.w[p+"ffn_up_shexp.weight"], r.w[p+"ffn_down_shexp.weight"], d, e.Shared)
	}
	gate, up, down := r.w[p+"ffn_gate_exps.weight"], r.w[p+"ffn_up_exps.weight"], r.w[p+"ffn_down_exps.weight"]
	for x, wx := range r.route(l, h) {
		y := swiGLURef(h, gate[x*f*d:(x+1)*f*d], up[x*f*d:(x+1)*f*d], down[x*d*f:(x+1)*d*f], d, f)
		for i := range out {
			out[i] += wx * y[i]
		}
	}
	return out
}

// step consumes one token at the next position and returns its logits.
func (r *archRef) step(tok int32) []float64 {
	c := r.c
	pos := len(r.k[0])
	x := append([]float64(nil), r.w["token_embd.weight"][int(tok)*c.Hidden:(int(tok)+1)*c.Hidden]...)
	eps := float64(c.RMSEps)
	for l := range c.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		h := rmsnorm(x, r.w[p+"attn_norm.weight"], eps)
		if c.mla() != nil {
			addTo(x, r.attnMLA(l, h, pos))
		} else {
			addTo(x, r.attnGQA(l, h, pos))
		}
		addTo(x, r.ffn(l, rmsnorm(x, r.w[p+"ffn_norm.weight"], eps)))
	}
	return matvec(r.w["output.weight"], rmsnorm(x, r.w["output_norm.weight"], eps), c.Vocab)
}

// writeArch writes gen-model's arch preset of size (f32) with layers
// overridden when > 0, and returns its path.
func writeArch(t testing.TB, arch, size string, layers int) string {
	t.Helper()
	spec, err := synth.ArchPreset(arch, size, "f32")
	if err != nil {
		t.Fatal(err)
	}
	if layers > 0 {
		spec.Layers = layers
	}
	var buf bytes.Buffer
	if err := synth.Write(&buf, spec, nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), arch+"-"+size+".gguf")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// relErr is max|got-want| over max|want| of a row of logits.
func relErr(got []float32, want []float64) float64 {
	var scale float64
	for _, w := range want {
		scale = math.Max(scale, math.Abs(w))
	}
	return maxDiff(got, want) / scale
}

// archTol is the tolerance of the float32 forward against the float64
// reference, relative to the largest logit (measured: below 2e-6).
const archTol = 1e-4

// TestArchsMatchFloat64Reference: for each architecture, a chunked prefill
// (logits of every prompt row) and 64 decode steps match the float64
// reference row by row.
func TestArchsMatchFloat64Reference(t *testing.T) {
	for _, arch := range []string{"qwen3moe", "deepseek2", "deepseek3"} {
		t.Run(arch, func(t *testing.T) {
			path := writeArch(t, arch, "tiny", 0)
			r := load(t, path, 16)
			ref := newArchRef(t, path)
			V := r.m.Config.Vocab
			prompt := []int32{1, 450, 4996, 17, 2, 31999, 808, 9, 77, 1203, 5, 6, 7, 8, 999, 4242, 13, 14, 15}
			var pages []int32
			split := 7
			got := r.run(t, &pages, prompt[:split], 0, split)
			got = append(got, r.run(t, &pages, prompt[split:], split, len(prompt)-split)...)
			worst := 0.0
			var last []float64
			for i, tok := range prompt {
				last = ref.step(tok)
				worst = math.Max(worst, relErr(got[i*V:(i+1)*V], last))
			}
			pos := len(prompt)
			for range 64 {
				next := argmax64(last)
				got := r.run(t, &pages, []int32{next}, pos, 1)
				last = ref.step(next)
				worst = math.Max(worst, relErr(got, last))
				pos++
			}
			t.Logf("%s: worst relative logit error %.3g over %d prefill rows and 64 decode steps", arch, worst, len(prompt))
			if worst > archTol {
				t.Fatalf("%s: logits differ from the float64 reference by %.3g relative (tolerance %g)", arch, worst, archTol)
			}
		})
	}
}
