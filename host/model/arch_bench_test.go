package model

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvhost/kvhost/host/model/synth"
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

// BenchmarkArchDecode reports decode tokens/s of gen-model's qwen3moe and
// deepseek2 presets at batch 1 and 16, with the experts grouped (each
// expert's matrices read once per step for all its rows) and ungrouped
// (one row at a time: each token reads its experts' matrices). Batch 1
// also reports weight-GB/s: the weight bytes a token reads (active
// parameters in the file's types, Config.TokenReadBytes) × tokens/s.
func BenchmarkArchDecode(b *testing.B) {
	for _, arch := range []string{"qwen3moe", "deepseek2"} {
		for _, size := range []string{"small", "medium"} {
			for _, batch := range []int{1, 16} {
				for _, grouped := range []bool{true, false} {
					if batch == 1 && !grouped {
						continue // one row: the same work
					}
					b.Run(fmt.Sprintf("%s-%s/batch=%d/grouped=%v", arch, size, batch, grouped), func(b *testing.B) {
						path := archBenchModel(b, arch, size, "f32")
						r := load(b, path, 2048)
						ungroup(r.m, !grouped)
						read := fileReadBytes(b, path, r.m.Config) // before the timed loop
						benchDecode(b, r, r.pools, nil, batch)
						if batch == 1 {
							reportWeightRate(b, read)
						}
					})
				}
			}
		}
	}
}

// BenchmarkArchPrefill reports prompt tokens/s for one 512-token prompt
// (one chunk), grouped and ungrouped.
func BenchmarkArchPrefill(b *testing.B) {
	for _, arch := range []string{"qwen3moe", "deepseek2"} {
		for _, size := range []string{"small", "medium"} {
			for _, grouped := range []bool{true, false} {
				b.Run(fmt.Sprintf("%s-%s/tokens=512/grouped=%v", arch, size, grouped), func(b *testing.B) {
					r := load(b, archBenchModel(b, arch, size, "f32"), 512/16+1)
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
					b.ResetTimer()
					for range b.N {
						if err := r.m.Forward(r.pools, []Seq{{Tokens: toks, Pages: one(pages), LogitRows: 1}}, logits); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N*len(toks))/b.Elapsed().Seconds(), "tok/s")
				})
			}
		}
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
