package model

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/kv/kvtest"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/internal/cputime"
	"github.com/kvhost/kvhost/sdk"
)

// benchModel generates (once, cached across runs in the temp dir) a demo
// model of the given size and dtype.
func benchModel(b *testing.B, size, dtype string) string {
	b.Helper()
	dir := filepath.Join(os.TempDir(), "kvhost-bench-models")
	path := filepath.Join(dir, size+"-"+dtype+".gguf")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	spec, err := synth.Preset(size, dtype)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := synth.Write(w, spec, nil); err != nil {
		b.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	if err := os.Rename(tmp, path); err != nil {
		b.Fatal(err)
	}
	return path
}

// benchShapes are the rows (f32, f16, q8_0, Q4_K_M) and the other
// common mixes, for both sizes.
var benchShapes = func() []struct{ size, dtype string } {
	var out []struct{ size, dtype string }
	for _, size := range []string{"small", "medium"} {
		for _, dtype := range []string{"f32", "f16", "q8_0", "q4_k_m", "q6_k", "q4_0", "q5_k_m"} {
			out = append(out, struct{ size, dtype string }{size, dtype})
		}
	}
	return out
}()

// benchKV is the KV encoding the decode and prefill benchmarks keep, what
// serve stores on the CPU device by default (plan.DefaultKVDType, which
// this package cannot import) and llama-bench's default cache type (f16):
// the figures bench-compare sets side by side are of the same cache.
const benchKV = sdk.KVFP16

// decodeSpan is how many positions the decode benchmarks walk after their
// 64-token prompt before starting over: 128, as llama-bench's tg128 (the
// figures the foundation issue quotes for a C/C++ engine) generates.
const decodeSpan = 128

// BenchmarkDecode reports decode tokens/s for a batch of sequences that
// each hold a 64-token prompt, and allocations per decode step.

func BenchmarkDecode(b *testing.B) {
	for _, sh := range benchShapes {
		for _, batch := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s-%s/batch=%d", sh.size, sh.dtype, batch), func(b *testing.B) {
				r := loadKV(b, benchModel(b, sh.size, sh.dtype), 2048, benchKV)
				benchDecode(b, r, r.pools, nil, batch)
			})
		}
	}
}

// BenchmarkDecodeKV is BenchmarkDecode over f32 weights with the KV cache
// in f32, f16 and fp8 (e4m3), eager and through captured graphs (as the
// engine decodes): what --kv-cache-dtype costs or saves per decoded token.
func BenchmarkDecodeKV(b *testing.B) {
	for _, size := range []string{"small", "medium"} {
		for _, kvd := range []string{sdk.KVFP32, sdk.KVFP16, sdk.KVFP8E4M3} {
			for _, mode := range []string{"eager", "graphs"} {
				for _, batch := range []int{1, 16} {
					b.Run(fmt.Sprintf("%s/kv=%s/%s/batch=%d", size, kvd, mode, batch), func(b *testing.B) {
						r := load(b, benchModel(b, size, "f32"), 16)
						pools := kvtest.MHA(b, r.arena, r.m.Config.KVNeeds(), kvd, 16, 2048+16)
						var g *DecodeGraphs
						if mode == "graphs" {
							var err error
							if g, err = r.m.CaptureDecodeGraphs(pools, []int{batch}); err != nil {
								b.Fatal(err)
							}
							defer g.Close()
						}
						benchDecode(b, r, pools, g, batch)
					})
				}
			}
		}
	}
}

// benchDecode decodes batch sequences, each after a 64-token prompt, over
// pools (through g when not nil), walking decodeSpan positions before
// starting over.
func benchDecode(b *testing.B, r *rig, pools *kv.Set, g *DecodeGraphs, batch int) {
	timeDecode(b, warmDecode(b, r, pools, g, batch), batch)
}

// warmDecode prefills benchDecode's batch sequences and walks their
// decodeSpan positions once, untimed; it returns the decode step.
func warmDecode(b *testing.B, r *rig, pools *kv.Set, g *DecodeGraphs, batch int) (step func()) {
	const prompt = 64
	p := pools.TokenPools()[0]
	seqs := make([]Seq, batch)
	for i := range seqs {
		toks := make([]int32, prompt)
		for j := range toks {
			toks[j] = int32(1 + (i*131+j*17)%31000)
		}
		pages, err := p.Grow(nil, r.m.Config.ContextLen)
		if err != nil {
			b.Fatal(err)
		}
		seqs[i] = Seq{Tokens: toks, Pages: one(pages), LogitRows: 1}
	}
	logits := make([]float32, batch*r.m.Config.Vocab)
	if err := r.m.Forward(pools, seqs, logits); err != nil {
		b.Fatal(err)
	}
	tok := make([]int32, batch)
	for i := range seqs {
		seqs[i].Tokens = tok[i : i+1]
		seqs[i].Start = prompt
	}
	step = func() {
		for i := range seqs {
			if seqs[i].Start >= prompt+decodeSpan {
				seqs[i].Start = prompt
			}
		}
		if g != nil {
			if ok, err := g.Run(seqs, logits); !ok || err != nil {
				b.Fatal(ok, err)
			}
		} else if err := r.m.Forward(pools, seqs, logits); err != nil {
			b.Fatal(err)
		}
		for i := range seqs {
			tok[i] = int32(argmax32(logits[i*r.m.Config.Vocab : (i+1)*r.m.Config.Vocab]))
			seqs[i].Start++
		}
	}
	// One untimed pass over the span: a serving pool's pages are already
	// resident (llama-bench likewise clears its cache once and warms up),
	// so the timed steps measure decoding, not first-touch page faults.
	for range decodeSpan {
		step()
	}
	return step
}

// timeDecode times step, batch tokens each, and reports tok/s and tok/cpu-s
// (reportCPURate). b.Loop runs the benchmark function once, so the set-up
// and warm-up before it are not repeated for -benchtime's ramp (nor for its
// first b.N = 1 call).
func timeDecode(b *testing.B, step func(), batch int) {
	b.ReportAllocs()
	cpu0 := cputime.Process().Seconds()
	for b.Loop() {
		step()
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "tok/s")
	reportCPURate(b, batch, cpu0)
}

// BenchmarkPrefill reports prompt tokens/s for one prompt of 128, 512 and
// 2048 tokens (llama-bench's pp128/pp512/pp2048); attention's share grows
// with the prompt, so pp2048 tracks the tiled attention kernel.
func BenchmarkPrefill(b *testing.B) {
	const chunk = 512
	for _, sh := range benchShapes {
		for _, n := range []int{128, 512, 2048} {
			b.Run(fmt.Sprintf("%s-%s/tokens=%d", sh.size, sh.dtype, n), func(b *testing.B) {
				r := loadKV(b, benchModel(b, sh.size, sh.dtype), n/16+1, benchKV)
				toks := make([]int32, n)
				for j := range toks {
					toks[j] = int32(1 + j*97%31000)
				}
				pages, err := r.pool.Grow(nil, len(toks))
				if err != nil {
					b.Fatal(err)
				}
				logits := make([]float32, r.m.Config.Vocab)
				prompt := func() {
					for s := 0; s < n; s += chunk {
						e := min(n, s+chunk)
						if err := r.m.Forward(r.pools, []Seq{{Tokens: toks[s:e], Start: s, Pages: one(pages), LogitRows: 1}}, logits); err != nil {
							b.Fatal(err)
						}
					}
				}
				// One untimed prompt first, as llama-bench runs a warm-up
				// prompt before its measured ones: the freshly loaded
				// model's first forward pays its first touches of the
				// weights, the KV pages and the activation arena (about
				// 2.5× a warm pp128 on the medium preset), which bench-compare's 3
				// timed runs would otherwise average in.
				prompt()
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					prompt()
				}
				b.ReportMetric(float64(b.N*len(toks))/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}
