package model

import (
	"encoding/json"
	"math"
	"runtime"
	"testing"

	"github.com/kvhost/kvhost/configurators/layout"
	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/sdk"
)

// swaArchs are the generated sliding-window architectures and the HF
// architecture each is served as.
var swaArchs = []struct{ arch, hf string }{
	{"mistral", "MistralForCausalLM"}, {"gemma2", "Gemma2ForCausalLM"},
	{"gemma3", "Gemma3ForCausalLM"}, {"gpt-oss", "GptOssForCausalLM"},
}

// writeSWA generates gen-model's f32 model of arch and size into a temp file.
func writeSWA(t *testing.T, arch, size string) string {
	t.Helper()
	return writeSWAExperts(t, arch, size, false)
}

// writeSWAExperts is writeSWA with gpt-oss's experts stored f32 (dense)
// instead of MXFP4.
func writeSWAExperts(t *testing.T, arch, size string, dense bool) string {
	t.Helper()
	spec, err := synth.ArchPreset(arch, size, "f32")
	if err != nil {
		t.Fatal(err)
	}
	spec.DenseExperts = dense
	return writeSpec(t, spec)
}

// mxfp4ModelTol bounds a model with MXFP4 experts against the float64
// reference (TestSWAMatchesFloat64Reference says why).
const mxfp4ModelTol = 1e-2

// swaConfigJSON is the config.json the swa configurator reads for c.
func swaTestConfigJSON(t testing.TB, c Config, hfArch string) []byte {
	types := make([]string, c.Layers)
	for i := range types {
		types[i] = "full_attention"
		if c.LayerWindow(i) > 0 {
			types[i] = "sliding_attention"
		}
	}
	raw, err := json.Marshal(map[string]any{"architectures": []string{hfArch}, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim,
		"hidden_size": c.Hidden, "sliding_window": SWAOf(c).Window, "layer_types": types})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// loadSWA loads path with the pools the swa configurator declares for it
// (a full pool for the global layers unless every layer slides, a window
// pool for the sliding ones), pages pages in each.
func loadSWA(t testing.TB, path, hfArch string, pages int) *rig {
	t.Helper()
	return loadSWAKV(t, path, hfArch, pages, sdk.KVFP32)
}

// loadSWAKV is loadSWA with a KV cache dtype.
func loadSWAKV(t testing.TB, path, hfArch string, pages int, kvDType string) *rig {
	t.Helper()
	dev, err := cpu.New(device.Options{MemoryBytes: 4 << 30, Threads: runtime.GOMAXPROCS(0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	r := &rig{dev: dev, act: alloc.New("caching", dev), arena: alloc.NewDirect("kv", dev)}
	if r.m, err = Load(path, Options{Device: dev, Weights: alloc.NewDirect("weights", dev), Activations: r.act}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.m.Close() })
	in := sdk.ConfigureInput{Model: swaTestConfigJSON(t, r.m.Config, hfArch), Host: sdk.HostFacts{KVDType: kvDType, PageSize: 16}.WithDefaults()}
	plan, err := layout.SWA{}.Plan(in)
	if err != nil {
		t.Fatal(err)
	}
	l, err := kv.NewLayout(plan.Pools(), r.m.Config.KVNeeds())
	if err != nil {
		t.Fatal(err)
	}
	units := make([]int, len(l.Pools))
	for i, p := range l.Pools {
		units[i] = pages * p.PageSize
	}
	if r.pools, err = kv.Allocate(l, units, r.arena); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.pools.Close)
	r.pool = r.pools.TokenPools()[0]
	return r
}

// swaSeq is one sequence over every token pool of a rig: it grows each
// table to the positions a forward writes and trims the window pools'
// pages no later query can read, as the engine does.
type swaSeq struct {
	r      *rig
	tables [][]int32
}

func (s *swaSeq) forward(t testing.TB, tokens []int32, start, logitRows int) []float32 {
	t.Helper()
	logits := make([]float32, logitRows*s.r.m.Config.Vocab)
	s.forwardInto(t, make([]Seq, 1), tokens, start, logits)
	return logits
}

// forwardInto is forward into logits (len(logits)/Vocab rows), with batch,
// of length 1, as the forward's sequence list: a benchmark reusing both
// allocates nothing per step of its own.
func (s *swaSeq) forwardInto(t testing.TB, batch []Seq, tokens []int32, start int, logits []float32) {
	t.Helper()
	pools := s.r.pools.TokenPools()
	if s.tables == nil {
		s.tables = make([][]int32, len(pools))
	}
	for i, p := range pools {
		p.Trim(s.tables[i], start-p.Window()+1)
		var err error
		if s.tables[i], err = p.Grow(s.tables[i], start+len(tokens)); err != nil {
			t.Fatal(err)
		}
	}
	batch[0] = Seq{Tokens: tokens, Start: start, Pages: s.tables, LogitRows: len(logits) / s.r.m.Config.Vocab}
	if err := s.r.m.Forward(s.r.pools, batch, logits); err != nil {
		t.Fatal(err)
	}
}

// held counts pool i's pages the sequence still holds.
func (s *swaSeq) held(i int) int {
	n := 0
	for _, pg := range s.tables[i] {
		if pg != kv.Released {
			n++
		}
	}
	return n
}

func (s *swaSeq) release() {
	for i, p := range s.r.pools.TokenPools() {
		p.Release(s.tables[i])
	}
	s.tables = nil
}

// relDiff is max |a − b| over max |b|: the relative tolerance.
func relDiff(a []float32, b []float64) float64 {
	var d, m float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-b[i]))
		m = math.Max(m, math.Abs(b[i]))
	}
	return d / math.Max(m, 1e-30)
}

// TestSWAMatchesFloat64Reference: each generated sliding-window model
// (tiny: a 16-token window, pages of 16) matches the float64 reference to
// 1e-4 relative at every position of a 40-token prompt prefilled in a
// chunk smaller than the window and one larger, then over 200 greedy
// decode steps far past the window, while the window pool's pages are
// released as the window moves (at most window/page + 2 held).
//
// gpt-oss runs twice: with f32 experts to 1e-4, and with its MXFP4 experts
// to mxfp4ModelTol. MXFP4 weights are dotted with 8-bit activation blocks
// (as llama.cpp does); the reference rounds every expert input the same
// way (refQ8), but kvhost's float32 activations and the reference's
// float64 ones land on different codes where a value sits within float32
// rounding of a half step, which moves that input by a whole step
// (its block's max/127): about 3e-3 of one expert's output on this tiny
// model; measured 2.8e-3 of the logits over the whole run (2.4e-2 with
// unrounded reference inputs).
func TestSWAMatchesFloat64Reference(t *testing.T) {
	type refCase struct {
		name, arch, hf string
		dense          bool
		tol            float64
	}
	var cases []refCase
	for _, a := range swaArchs {
		cases = append(cases, refCase{a.arch, a.arch, a.hf, a.arch == "gpt-oss", 1e-4})
	}
	cases = append(cases, refCase{"gpt-oss mxfp4", "gpt-oss", "GptOssForCausalLM", false, mxfp4ModelTol})
	for _, a := range cases {
		t.Run(a.name, func(t *testing.T) {
			path := writeSWAExperts(t, a.arch, "tiny", a.dense)
			r := loadSWA(t, path, a.hf, 64)
			c := r.m.Config
			ref := newSWARef(t, path, c)
			V, W := c.Vocab, SWAOf(c).Window
			prompt := make([]int32, 40)
			for i := range prompt {
				prompt[i] = int32(3 + (i*7919+13)%(V-3))
			}
			seq := &swaSeq{r: r}
			defer seq.release()
			worst := 0.0
			check := func(logits []float32, tok int32) {
				d := relDiff(logits, ref.step(tok))
				worst = math.Max(worst, d)
			}
			pos := 0
			var last []float32
			for _, n := range []int{7, 33} { // a chunk under the window, one over it
				got := seq.forward(t, prompt[pos:pos+n], pos, n)
				for i := 0; i < n; i++ {
					check(got[i*V:(i+1)*V], prompt[pos+i])
				}
				last = got[(n-1)*V:]
				pos += n
			}
			if worst > a.tol {
				t.Fatalf("prefill logits differ from the float64 reference by %g relative (bound %g)", worst, a.tol)
			}
			pre := worst
			bound := W/16 + 2
			for range 200 {
				next := int32(argmax32(last))
				last = seq.forward(t, []int32{next}, pos, 1)
				check(last, next)
				pos++
				for i, p := range r.pools.TokenPools() {
					if p.Kind() == sdk.SlidingWindow && seq.held(i) > bound {
						t.Fatalf("position %d: the window pool holds %d pages, more than window/page + 2 = %d", pos, seq.held(i), bound)
					}
				}
			}
			if worst > a.tol {
				t.Fatalf("decode logits differ from the float64 reference by %g relative (bound %g)", worst, a.tol)
			}
			t.Logf("%s: max relative difference %.2g in prefill, %.2g over 200 decode steps to position %d", a.name, pre, worst, pos)
		})
	}
}
