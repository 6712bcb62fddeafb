package model

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/configurators/layout"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/internal/mambaref"
	"github.com/kvhost/kvhost/internal/testmodels"
	"github.com/kvhost/kvhost/sdk"
)

// hybridArchs are the generated models the tests run: both
// architectures, and Granite's MoE variant (4 experts, 2 per token).
var hybridArchs = []string{"nemotron_h", "granitehybrid", "granitehybrid-moe"}

func writeHybrid(t testing.TB, arch, size string) string {
	t.Helper()
	return writeHybridTok(t, arch, size, "")
}

// writeHybridTok writes the hybrid preset arch ("-moe": Granite's MoE
// variant) of size with tokenizer tok ("": the preset's SentencePiece).
func writeHybridTok(t testing.TB, arch, size, tok string) string {
	t.Helper()
	base, moe := strings.CutSuffix(arch, "-moe")
	s, err := synth.HybridPreset(base, size, "f32")
	if err != nil {
		t.Fatal(err)
	}
	if moe {
		s.Experts, s.ExpertsUsed, s.ExpertFF = 4, 2, s.FF/2
	}
	name := arch + "-" + size + ".gguf"
	if tok != "" {
		s.Tokenizer, name = tok, arch+"-"+size+"-"+tok+".gguf"
	}
	path := filepath.Join(t.TempDir(), name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.WriteHybrid(f, s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// hybridPools realises what the mamba configurator declares for c (its
// HF equivalent): a state pool of slots request slots and a KV pool of
// pages pages. convF32 re-declares the conv states as fp32 (the
// configurator's bf16 rounds them; the strict reference checks want f32).
func hybridPools(t testing.TB, r *rig, slots, pages int, convF32 bool) *kv.Set {
	t.Helper()
	raw, err := json.Marshal(r.m.Config.HybridHF())
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.Mamba{}.Plan(sdk.ConfigureInput{Model: raw, Host: sdk.HostFacts{KVDType: sdk.KVFP32, PageSize: 16, TPSize: 1,
		ContextLength: int64(r.m.Config.ContextLen)}})
	if err != nil {
		t.Fatal(err)
	}
	decl := p.Pools()
	if convF32 {
		for i := range decl {
			var total int64
			for j, b := range decl[i].Buffers {
				if b.Role == sdk.RoleConv {
					decl[i].Buffers[j].DType = "fp32"
				}
				n, err := decl[i].Buffers[j].Bytes()
				if err != nil {
					t.Fatal(err)
				}
				total += n
			}
			decl[i].BytesPerUnit = total
		}
	}
	l, err := kv.NewLayout(decl, r.m.Config.KVNeeds())
	if err != nil {
		t.Fatal(err)
	}
	units := make([]int, len(l.Pools))
	for i, pl := range l.Pools {
		units[i] = slots
		if pl.Tokens() {
			units[i] = pages * pl.PageSize
		}
	}
	s, err := kv.Allocate(l, units, r.arena)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// hybridSeq is one sequence's holding of a hybrid model's pools.
type hybridSeq struct {
	pools  *kv.Set
	tables [][]int32
	slots  []int32
	pos    int
}

func newHybridSeq(t testing.TB, pools *kv.Set) *hybridSeq {
	t.Helper()
	s := &hybridSeq{pools: pools, tables: make([][]int32, len(pools.TokenPools())), slots: make([]int32, len(pools.SlotPools()))}
	for i, p := range pools.SlotPools() {
		var err error
		if s.slots[i], err = p.Acquire(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(s.release)
	return s
}

func (s *hybridSeq) release() {
	for i, p := range s.pools.TokenPools() {
		p.Release(s.tables[i])
		s.tables[i] = nil
	}
	for i, p := range s.pools.SlotPools() {
		if s.slots[i] >= 0 {
			p.Release(s.slots[i])
			s.slots[i] = -1
		}
	}
}

// seq grows the page tables for tokens and returns the forward's Seq.
func (s *hybridSeq) seq(t testing.TB, tokens []int32, logitRows int) Seq {
	t.Helper()
	for i, p := range s.pools.TokenPools() {
		var err error
		if s.tables[i], err = p.Grow(s.tables[i], s.pos+len(tokens)); err != nil {
			t.Fatal(err)
		}
	}
	q := Seq{Tokens: tokens, Start: s.pos, Pages: s.tables, Slots: s.slots, LogitRows: logitRows}
	s.pos += len(tokens)
	return q
}

func (s *hybridSeq) run(t testing.TB, m *Model, tokens []int32, logitRows int) []float32 {
	t.Helper()
	out := make([]float32, logitRows*m.Config.Vocab)
	if err := m.Forward(s.pools, []Seq{s.seq(t, tokens, logitRows)}, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func hybridRig(t testing.TB, path string) *rig {
	t.Helper()
	// load() declares MHA pools, which a hybrid model does not fit; build
	// the rig by hand.
	r := load(t, writeTiny(t, "f32"), 1)
	m, err := Load(path, Options{Device: r.dev, Weights: r.m.weights, Activations: r.act})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	r.m, r.pools, r.pool = m, nil, nil
	return r
}

// TestHybridMatchesFloat64Reference: both hybrid architectures' logits, for
// a prefill in chunks of odd sizes and 200 decode steps, match the float64
// reference forward (internal/mambaref's sequential recurrence for the
// Mamba layers, plain attention, the MLPs and Granite's multipliers written
// out) to 1e-4 of the largest logit.
func TestHybridMatchesFloat64Reference(t *testing.T) {
	for _, arch := range hybridArchs {
		t.Run(arch, func(t *testing.T) {
			path := writeHybrid(t, arch, "tiny")
			r := hybridRig(t, path)
			ref := newRefHybrid(t, path, r.m.Config)
			pools := hybridPools(t, r, 4, 32, true)
			s := newHybridSeq(t, pools)
			V := r.m.Config.Vocab
			prompt := make([]int32, 37)
			for i := range prompt {
				prompt[i] = int32(1 + (i*7919)%(V-1))
			}
			check := func(step string, got []float32, want []float64) {
				t.Helper()
				if e := relErr(got, want); e > 1e-4 || math.IsNaN(e) {
					t.Fatalf("%s: logits differ from the float64 reference by %.3g of the largest (want <= 1e-4)", step, e)
				}
			}
			for _, chunk := range [][2]int{{0, 13}, {13, 20}, {20, 37}} {
				toks := prompt[chunk[0]:chunk[1]]
				got := s.run(t, r.m, toks, 1)
				var want []float64
				for _, tok := range toks {
					want = ref.step(tok)
				}
				check("prefill chunk "+strconv.Itoa(chunk[1]), got, want)
			}
			next := prompt[len(prompt)-1]
			for i := range 200 {
				next = int32((int(next)*31 + i) % V)
				check("decode step "+strconv.Itoa(i), s.run(t, r.m, []int32{next}, 1), ref.step(next))
			}
		})
	}
}

// TestHybridPrefillThenDecodeEqualsOnePrefill: a prompt prefilled then
// decoded token by token, in a batch beside another sequence at a
// different position, gives the logits one long prefill gives at every
// position (to 1e-5 of the largest: the chunked SSD scan and the
// single-step recurrence round differently); a slot that served a longer
// request serves a new one from zero.
func TestHybridPrefillThenDecodeEqualsOnePrefill(t *testing.T) {
	for _, arch := range hybridArchs {
		t.Run(arch, func(t *testing.T) {
			r := hybridRig(t, writeHybrid(t, arch, "tiny"))
			pools := hybridPools(t, r, 4, 32, true)
			V := r.m.Config.Vocab
			toks := make([]int32, 48)
			for i := range toks {
				toks[i] = int32(1 + (i*104729)%(V-1))
			}
			// Dirty a slot first: the next sequence reuses it.
			dirty := newHybridSeq(t, pools)
			dirty.run(t, r.m, toks[5:40], 1)
			dirty.release()

			long := newHybridSeq(t, pools)
			want := long.run(t, r.m, toks, len(toks))
			a, b := newHybridSeq(t, pools), newHybridSeq(t, pools)
			a.run(t, r.m, toks[:20], 1)
			b.run(t, r.m, toks[30:33], 1)
			for i := 20; i < len(toks); i++ {
				out := make([]float32, 2*V)
				seqs := []Seq{b.seq(t, []int32{toks[(i+13)%len(toks)]}, 1), a.seq(t, toks[i:i+1], 1)}
				if err := r.m.Forward(pools, seqs, out); err != nil {
					t.Fatal(err)
				}
				w := make([]float64, V)
				for j := range w {
					w[j] = float64(want[i*V+j])
				}
				if e := relErr(out[V:], w); e > 1e-5 {
					t.Fatalf("position %d: decode differs from one prefill by %.3g of the largest logit", i, e)
				}
			}
		})
	}
}

// TestHybridMatchesLlamaCpp: greedy text from the generated tiny models
// equals llama.cpp's llama-simple on the same GGUF files (llama.cpp runs
// both architectures: nemotron_h, granitehybrid), over the configurator's
// own pools (conv state in bf16, as declared).
func TestHybridMatchesLlamaCpp(t *testing.T) {
	tools, ok := testmodels.LlamaCpp()
	if !ok {
		t.Skip("skipping: ../shared/tools/llama.cpp is absent; this cross-check runs llama-simple")
	}
	for _, arch := range hybridArchs {
		t.Run(arch, func(t *testing.T) {
			path := writeHybrid(t, arch, "tiny")
			const prompt, n = "Once upon a time", 32
			out, err := exec.Command(filepath.Join(tools, "run"), "llama-simple", "-m", path, "-n", strconv.Itoa(n), prompt).Output()
			if err != nil {
				t.Fatalf("llama-simple: %v", err)
			}
			want := strings.TrimSpace(string(out))
			r := hybridRig(t, path)
			s := newHybridSeq(t, hybridPools(t, r, 2, 16, false))
			toks, err := r.m.Tokenizer.Encode(prompt, true)
			if err != nil {
				t.Fatal(err)
			}
			logits := s.run(t, r.m, toks, 1)
			var gen []int32
			for range n {
				next := int32(argmax32(logits))
				if r.m.Tokenizer.EOG(next) {
					break
				}
				gen = append(gen, next)
				logits = s.run(t, r.m, []int32{next}, 1)
			}
			text, err := r.m.Tokenizer.Decode(gen)
			if err != nil {
				t.Fatal(err)
			}
			// SentencePiece drops the first piece's leading space when it
			// decodes the generated tokens alone.
			got, spaced := prompt+text, prompt+" "+text
			if !strings.HasSuffix(want, got) && !strings.HasSuffix(want, spaced) || len(gen) < 4 {
				t.Fatalf("greedy text differs from llama.cpp's:\nkvhost:    %q\nllama.cpp: %q", got, want)
			}
		})
	}
}

// refHybrid is the float64 reference forward of a generated hybrid model,
// read from its GGUF file and fed one token at a time.
type refHybrid struct {
	c             Config
	emb, out      [][]float64
	outNorm       []float64
	layers        []refLayer
	embScale, res float64
}

type refLayer struct {
	norm, ffnNorm  []float64
	mc             mambaref.Config
	mw             *mambaref.Weights
	st             *mambaref.State
	wq, wk, wv, wo [][]float64
	gate, up, down [][]float64
	router         [][]float64
	gateE, upE     [][][]float64 // [expert][ff][hidden]
	downE          [][][]float64 // [expert][hidden][ff]
	keys, vals     [][]float64
}

func newRefHybrid(t *testing.T, path string, c Config) *refHybrid {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vals := func(name string) []float64 {
		ti, raw, err := f.Tensor(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ti.Type != gguf.TypeF32 {
			t.Fatalf("%s is %v; the reference reads f32 files", name, ti.Type)
		}
		out := make([]float64, len(raw)/4)
		for i := range out {
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
		}
		return out
	}
	mat := func(name string, rows int) [][]float64 {
		v := vals(name)
		cols := len(v) / rows
		m := make([][]float64, rows)
		for i := range m {
			m[i] = v[i*cols : (i+1)*cols]
		}
		return m
	}
	h := c.Hybrid()
	r := &refHybrid{c: c, emb: mat("token_embd.weight", c.Vocab), out: mat("output.weight", c.Vocab), outNorm: vals("output_norm.weight"),
		embScale: float64(h.EmbedMult), res: float64(h.ResidualScale)}
	s := h.Mamba
	for i, kind := range h.Layers {
		p := "blk." + strconv.Itoa(i) + "."
		L := refLayer{norm: vals(p + "attn_norm.weight")}
		switch {
		case kind.FFN == FFNMoE:
			L.ffnNorm = vals(p + "ffn_norm.weight")
			L.gate, L.up, L.down = mat(p+"ffn_gate_shexp.weight", c.Intermediate), mat(p+"ffn_up_shexp.weight", c.Intermediate), mat(p+"ffn_down_shexp.weight", c.Hidden)
			L.router = mat(p+"ffn_gate_inp.weight", h.Experts)
			split := func(m [][]float64) [][][]float64 {
				per := len(m) / h.Experts
				out := make([][][]float64, h.Experts)
				for e := range out {
					out[e] = m[e*per : (e+1)*per]
				}
				return out
			}
			L.gateE = split(mat(p+"ffn_gate_exps.weight", h.Experts*h.ExpertFF))
			L.upE = split(mat(p+"ffn_up_exps.weight", h.Experts*h.ExpertFF))
			L.downE = split(mat(p+"ffn_down_exps.weight", h.Experts*c.Hidden))
		case c.Arch == "granitehybrid":
			L.ffnNorm = vals(p + "ffn_norm.weight")
			L.gate, L.up, L.down = mat(p+"ffn_gate.weight", c.Intermediate), mat(p+"ffn_up.weight", c.Intermediate), mat(p+"ffn_down.weight", c.Hidden)
		}
		switch kind.Mixer {
		case MixerMamba:
			L.mc = mambaref.Config{Hidden: c.Hidden, Heads: s.Heads, HeadDim: s.HeadDim, Groups: s.Groups, State: s.State, ConvKernel: s.ConvKernel,
				DtMin: 0, DtMax: math.Inf(1), NormGroup: h.NormGroup, Eps: float64(c.RMSEps)}
			a := vals(p + "ssm_a")
			alog := make([]float64, len(a))
			for j, x := range a {
				alog[j] = math.Log(-x) // GGUF keeps A = −exp(A_log)
			}
			L.mw = &mambaref.Weights{InProj: mat(p+"ssm_in.weight", L.mc.InProj()), ConvW: mat(p+"ssm_conv1d.weight", L.mc.ConvDim()),
				ConvB: vals(p + "ssm_conv1d.bias"), ALog: alog, D: vals(p + "ssm_d"), DtBias: vals(p + "ssm_dt.bias"),
				NormW: vals(p + "ssm_norm.weight"), OutProj: mat(p+"ssm_out.weight", c.Hidden)}
			L.st = mambaref.NewState(L.mc)
		case MixerAttention:
			L.wq, L.wk, L.wv, L.wo = mat(p+"attn_q.weight", c.QRow()), mat(p+"attn_k.weight", c.KVRow()), mat(p+"attn_v.weight", c.KVRow()), mat(p+"attn_output.weight", c.Hidden)
		}
		if kind.FFN == FFNReLU2 {
			L.up, L.down = mat(p+"ffn_up.weight", c.Intermediate), mat(p+"ffn_down.weight", c.Hidden)
		}
		r.layers = append(r.layers, L)
	}
	return r
}

func refRMSNorm(x, w []float64, eps float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	sc := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * sc * w[i]
	}
	return out
}

// step feeds one token and returns its logits.
func (r *refHybrid) step(tok int32) []float64 {
	c, eps := r.c, float64(r.c.RMSEps)
	x := make([]float64, c.Hidden)
	for i, v := range r.emb[tok] {
		x[i] = v * r.embScale
	}
	add := func(d []float64) {
		for i := range x {
			x[i] += r.res * d[i]
		}
	}
	for li, kind := range c.Hybrid().Layers {
		L := &r.layers[li]
		switch kind.Mixer {
		case MixerMamba:
			add(mambaref.Forward(L.mc, L.mw, L.st, [][]float64{refRMSNorm(x, L.norm, eps)})[0])
		case MixerAttention:
			add(r.attention(L, refRMSNorm(x, L.norm, eps)))
		}
		norm := L.ffnNorm
		if kind.Mixer == MixerNone {
			norm = L.norm
		}
		switch kind.FFN {
		case FFNReLU2:
			u := mambaref.MatVec(L.up, refRMSNorm(x, norm, eps))
			for i, v := range u {
				v = math.Max(v, 0)
				u[i] = v * v
			}
			add(mambaref.MatVec(L.down, u))
		case FFNSwiGLU:
			add(refSwiGLU(L.gate, L.up, L.down, refRMSNorm(x, norm, eps)))
		case FFNMoE:
			hn := refRMSNorm(x, norm, eps)
			out := refSwiGLU(L.gate, L.up, L.down, hn)
			// Granite: top-k on the router's logits, softmax over the k.
			logits := mambaref.MatVec(L.router, hn)
			var chosen []int
			for range c.Hybrid().ExpertsUsed {
				best := -1
				for e, v := range logits {
					if !slices.Contains(chosen, e) && (best < 0 || v > logits[best]) {
						best = e
					}
				}
				chosen = append(chosen, best)
			}
			sum := 0.0
			for _, e := range chosen {
				sum += math.Exp(logits[e] - logits[chosen[0]])
			}
			for _, e := range chosen {
				w := math.Exp(logits[e]-logits[chosen[0]]) / sum
				for i, v := range refSwiGLU(L.gateE[e], L.upE[e], L.downE[e], hn) {
					out[i] += w * v
				}
			}
			add(out)
		}
	}
	logits := mambaref.MatVec(r.out, refRMSNorm(x, r.outNorm, eps))
	for i := range logits {
		logits[i] /= float64(c.Hybrid().LogitDiv)
	}
	return logits
}

func refSwiGLU(gate, up, down [][]float64, hn []float64) []float64 {
	g, u := mambaref.MatVec(gate, hn), mambaref.MatVec(up, hn)
	for i := range g {
		g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
	}
	return mambaref.MatVec(down, g)
}

// attention is causal GQA over every position so far, no rotary
// embedding, scores scaled by the architecture's attention scale.
func (r *refHybrid) attention(L *refLayer, hn []float64) []float64 {
	c := r.c
	q, k, v := mambaref.MatVec(L.wq, hn), mambaref.MatVec(L.wk, hn), mambaref.MatVec(L.wv, hn)
	L.keys, L.vals = append(L.keys, k), append(L.vals, v)
	out := make([]float64, c.QRow())
	hd, group := c.HeadDim, c.Heads/c.KVHeads
	for h := range c.Heads {
		kvh := h / group
		scores := make([]float64, len(L.keys))
		top := math.Inf(-1)
		for j, kj := range L.keys {
			s := 0.0
			for d := range hd {
				s += q[h*hd+d] * kj[kvh*hd+d]
			}
			scores[j] = s * float64(c.Hybrid().AttnScale)
			top = math.Max(top, scores[j])
		}
		sum := 0.0
		for j := range scores {
			scores[j] = math.Exp(scores[j] - top)
			sum += scores[j]
		}
		for j, vj := range L.vals {
			for d := range hd {
				out[h*hd+d] += scores[j] / sum * vj[kvh*hd+d]
			}
		}
	}
	return mambaref.MatVec(L.wo, out)
}

// TestHybridDecodeGraphsEqualEager: decode steps replayed from captured
// graphs (a batch of 3 padded to the bucket of 4, each row's state slot
// rewritten before every replay) give the eager forward's logits (to 1e-4
// of the largest: the padded batch's matmuls sum in another order, and
// the states carry that rounding from step to step).
func TestHybridDecodeGraphsEqualEager(t *testing.T) {
	for _, arch := range hybridArchs {
		t.Run(arch, func(t *testing.T) {
			r := hybridRig(t, writeHybrid(t, arch, "tiny"))
			pools := hybridPools(t, r, 8, 64, false)
			g, err := r.m.CaptureDecodeGraphs(pools, []int{1, 2, 4})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			V := r.m.Config.Vocab
			const n = 3
			var eager, graphs []*hybridSeq
			next := make([]int32, n)
			for i := range n {
				toks := make([]int32, 5+7*i)
				for j := range toks {
					toks[j] = int32(1 + (i*131+j*17)%(V-1))
				}
				a, b := newHybridSeq(t, pools), newHybridSeq(t, pools)
				la := a.run(t, r.m, toks, 1)
				b.run(t, r.m, toks, 1)
				eager, graphs = append(eager, a), append(graphs, b)
				next[i] = int32(argmax32(la))
			}
			ea, eb := make([]float32, n*V), make([]float32, n*V)
			for step := range 20 {
				sa, sb := make([]Seq, n), make([]Seq, n)
				for i := range n {
					sa[i], sb[i] = eager[i].seq(t, next[i:i+1], 1), graphs[i].seq(t, next[i:i+1], 1)
				}
				if err := r.m.Forward(pools, sa, ea); err != nil {
					t.Fatal(err)
				}
				ok, err := g.Run(sb, eb)
				if err != nil || !ok {
					t.Fatalf("step %d: replay ran %v: %v", step, ok, err)
				}
				want := make([]float64, len(ea))
				for i, v := range ea {
					want[i] = float64(v)
				}
				if e := relErr(eb, want); e > 1e-4 {
					t.Fatalf("step %d: replayed logits differ from eager by %.3g of the largest", step, e)
				}
				for i := range n {
					next[i] = int32(argmax32(ea[i*V : (i+1)*V]))
				}
			}
		})
	}
}
