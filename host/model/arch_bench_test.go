package model

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/internal/cputime"
)

// archBenchModel generates (once, cached in the temp dir) gen-model's
// arch preset of size.
func archBenchModel(b *testing.B, arch, size, dtype string) string {
	b.Helper()
	dir := filepath.Join(os.TempDir(), "kvhost-bench-models")
	path := filepath.Join(dir, arch+"-"+size+"-"+dtype+".gguf")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	spec, err := synth.ArchPreset(arch, size, dtype)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(path + ".tmp")
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
	if err := os.Rename(path+".tmp", path); err != nil {
		b.Fatal(err)
	}
	return path
}

// archBenchTypes are the file types the expert benchmarks run per size:
// small in f32; medium also in f16 and q8_0 (half and about a quarter of
// the f32 file's bytes, the experts stored in that type too). Sub-benchmark
// names carry the type (qwen3moe-medium-q8_0), so -bench regexps pick one.
var archBenchTypes = map[string][]string{"small": {"f32"}, "medium": {"f32", "f16", "q8_0"}}

// BenchmarkArchDecode reports decode tokens/s of gen-model's qwen3moe and
// deepseek2 presets at batch 1 and 16, with the experts grouped (each
// expert's matrices read once per step for all its rows) and ungrouped
// (one row at a time: each token reads its experts' matrices). Batch 1
// also reports weight-GB/s: the weight bytes a token reads (active
// parameters in the file's types, Config.TokenReadBytes) × tokens/s.
// The untimed warm-up (decodeSpan steps touching the KV pages) runs
// grouped either way, then one ungrouped step before the timed ones: the
// same pages and buffers, a sixteenth of an ungrouped warm-up's time.
func BenchmarkArchDecode(b *testing.B) {
	for _, arch := range []string{"qwen3moe", "deepseek2"} {
		for _, size := range []string{"small", "medium"} {
			for _, dtype := range archBenchTypes[size] {
				for _, batch := range []int{1, 16} {
					for _, grouped := range []bool{true, false} {
						if batch == 1 && !grouped {
							continue // one row: the same work
						}
						b.Run(fmt.Sprintf("%s-%s-%s/batch=%d/grouped=%v", arch, size, dtype, batch, grouped), func(b *testing.B) {
							path := archBenchModel(b, arch, size, dtype)
							r := load(b, path, 2048)
							read := fileReadBytes(b, path, r.m.Config) // before the timed loop
							step := warmDecode(b, r, r.pools, nil, batch)
							if !grouped {
								ungroup(r.m, true)
								step()
							}
							timeDecode(b, step, batch)
							if batch == 1 {
								reportWeightRate(b, read)
							}
						})
					}
				}
			}
		}
	}
}

// BenchmarkArchPrefill reports prompt tokens/s for one 512-token prompt
// (one chunk), grouped and ungrouped; the model loads once per
// sub-benchmark (b.Loop), whatever -benchtime asks.
func BenchmarkArchPrefill(b *testing.B) {
	for _, arch := range []string{"qwen3moe", "deepseek2"} {
		for _, size := range []string{"small", "medium"} {
			for _, dtype := range archBenchTypes[size] {
				for _, grouped := range []bool{true, false} {
					b.Run(fmt.Sprintf("%s-%s-%s/tokens=512/grouped=%v", arch, size, dtype, grouped), func(b *testing.B) {
						r := load(b, archBenchModel(b, arch, size, dtype), 512/16+1)
						ungroup(r.m, !grouped)
						toks := make([]int32, 512)
						for j := range toks {
							toks[j] = int32(1 + j*97%31000)
						}
						pages, err := r.pool.Grow(nil, len(toks))
						if err != nil {
							b.Fatal(err)
						}
						logits := make([]float32, r.m.Config.Vocab)
						cpu0 := cputime.Process().Seconds()
						for b.Loop() {
							if err := r.m.Forward(r.pools, []Seq{{Tokens: toks, Pages: one(pages), LogitRows: 1}}, logits); err != nil {
								b.Fatal(err)
							}
						}
						b.ReportMetric(float64(b.N*len(toks))/b.Elapsed().Seconds(), "tok/s")
						reportCPURate(b, len(toks), cpu0)
					})
				}
			}
		}
	}
}

// reportCPURate adds tok/cpu-s: the tokens of the b.N iterations that just
// ran (perIter each) over the process CPU time since cpu0 (with two threads
// it counts the pool's spin-waits too).
func reportCPURate(b *testing.B, perIter int, cpu0 float64) {
	if c := cputime.Process().Seconds() - cpu0; cpu0 > 0 && c > 0 {
		b.ReportMetric(float64(b.N*perIter)/c, "tok/cpu-s")
	}
}

// ungroup sets the experts of every MoE layer to run a row at a time.
func ungroup(m *Model, on bool) {
	for _, l := range m.layers {
		if f, ok := l.FFN.(*moePart); ok {
			f.ungrouped = on
		}
	}
}
