package model

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvhost/kvhost/configurators/layout"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/internal/cputime"
	"github.com/kvhost/kvhost/sdk"
)

// swaBenchModel generates (once per temp dir) arch at size in f32.
func swaBenchModel(b *testing.B, arch, size string) string {
	b.Helper()
	path := filepath.Join(os.TempDir(), "kvhost-bench-models", arch+"-"+size+"-f32.gguf")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	spec, err := synth.ArchPreset(arch, size, "f32")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(path + ".tmp")
	if err != nil {
		b.Fatal(err)
	}
	if err := synth.Write(f, spec, nil); err != nil {
		b.Fatal(err)
	}
	f.Close()
	if err := os.Rename(path+".tmp", path); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkSWA reports decode tok/s (one sequence, eager, past the window
// with its pages released) and prefill tok/s (a 512-token prompt in
// 256-token chunks), each also per CPU-second (tok/cpu-s, steadier on a
// shared machine), of each sliding-window architecture's small and medium
// generated model, on the pools the swa configurator declares.
func BenchmarkSWA(b *testing.B) {
	for _, a := range swaArchs {
		for _, size := range []string{"small", "medium"} {
			b.Run(fmt.Sprintf("%s-%s/decode", a.arch, size), func(b *testing.B) {
				r := loadSWA(b, swaBenchModel(b, a.arch, size), a.hf, 256)
				seq := &swaSeq{r: r}
				defer seq.release()
				logits := seq.forward(b, []int32{1, 2, 3, 4, 5, 6, 7, 8}, 0, 1)
				pos, tok, batch := 8, make([]int32, 1), make([]Seq, 1)
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := cputime.Process().Seconds()
				for range b.N {
					if pos == r.m.Config.ContextLen {
						b.StopTimer()
						seq.release()
						pos = 0
						b.StartTimer()
					}
					tok[0] = int32(argmax32(logits))
					seq.forwardInto(b, batch, tok, pos, logits) // allocs/op: the forward's alone
					pos++
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
				reportCPURate(b, 1, cpu0)
			})
			b.Run(fmt.Sprintf("%s-%s/prefill", a.arch, size), func(b *testing.B) {
				r := loadSWA(b, swaBenchModel(b, a.arch, size), a.hf, 256)
				toks := make([]int32, 512)
				for j := range toks {
					toks[j] = int32(1 + j*97%31000)
				}
				b.ResetTimer()
				cpu0 := cputime.Process().Seconds()
				for range b.N {
					seq := &swaSeq{r: r}
					for s := 0; s < len(toks); s += 256 {
						seq.forward(b, toks[s:s+256], s, 1)
					}
					seq.release()
				}
				b.ReportMetric(float64(b.N*len(toks))/b.Elapsed().Seconds(), "tok/s")
				reportCPURate(b, len(toks), cpu0)
			})
		}
	}
}

// TestSWASequencesPerGiB: how many 8,192-token sequences a KV budget of
// f16 holds (1 GiB for gpt-oss-20b; 8 GiB for Gemma-2-9B, of which one
// such sequence takes 2.1 GB) for the published Gemma-2-9B and
// gpt-oss-20b configs with the swa configurator's cells: as full
// attention; with the window pool, where a sequence keeps every token of
// the full layers and at most sdk.WindowPages of each sliding layer (what
// the engine's trimming leaves with prefill chunks of chunk tokens,
// kv.Pool.MaxPages), computed here from the cells; with SGLang's split
// (--sglang-compat: swa_full_tokens_ratio 0.8, the window pool gets 0.8 of
// the full pool's tokens), which holds only as many as full attention,
// since 8k-token sequences exhaust its full pool while they use under 1%
// of its window pool: 0.8 is a ratio for short contexts; and with the
// split serve uses by default (max_running_requests sequences' window
// pages in the window pool, the rest in the full pool), which serves as
// many as the window pool allows when max_running_requests asks for them.
func TestSWASequencesPerGiB(t *testing.T) {
	const gib, ctx, page = 1 << 30, 8192, 16
	for _, tc := range []struct {
		name       string
		budget     int64
		window     int64
		chunk      int64
		sw         int64 // sequences with the window pool
		full       int64 // as full attention
		ratio      int64 // with SGLang's 0.8 split
		defaultRun int64 // served with serve's default 32 running requests
	}{
		{"gemma-2-9b-it", 8 * gib, 4096, 16, 4, 3, 3, 3}, {"gemma-2-9b-it", 8 * gib, 4096, 512, 3, 3, 3, 3},
		{"gpt-oss-20b", gib, 128, 16, 5, 2, 2, 4}, {"gpt-oss-20b", gib, 128, 512, 4, 2, 2, 2},
	} {
		sized := func(h sdk.HostFacts) (fullB, swaB int64, units map[string]int64) {
			h.KVDType, h.PageSize, h.ContextLength, h.ChunkedPrefill = sdk.KVFP16, page, ctx, tc.chunk
			plan, err := layout.SWA{}.Plan(sdk.ConfigureInput{Model: readConfig(t, tc.name), Host: h.WithDefaults()})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range plan.Pools() {
				if p.Kind == sdk.SlidingWindow {
					swaB = p.BytesPerUnit
				} else {
					fullB = p.BytesPerUnit
				}
			}
			if units, err = plan.Size(tc.budget, 0, 0); err != nil {
				t.Fatal(err)
			}
			return fullB, swaB, units
		}
		full, swa, units := sized(sdk.HostFacts{SGLangCompat: true})
		perWindow := min(ctx, sdk.WindowPages(tc.window, tc.chunk, page)*page)
		withWindow, asFull := tc.budget/(ctx*full+perWindow*swa), tc.budget/(ctx*(full+swa))
		atRatio := min(units["full"]/ctx, units["swa"]/perWindow)
		t.Logf("%s, chunk %d: %d B/token full layers, %d B/token sliding layers: %d sequences of 8k tokens in %d GiB with the window pool, %d as full attention; SGLang's 0.8 split: %d full-pool and %d window-pool tokens: %d sequences",
			tc.name, tc.chunk, full, swa, withWindow, tc.budget/gib, asFull, units["full"], units["swa"], atRatio)
		if withWindow != tc.sw || asFull != tc.full || atRatio != tc.ratio {
			t.Errorf("%s, chunk %d: %d with the window, %d as full attention, %d with SGLang's split; want %d, %d and %d",
				tc.name, tc.chunk, withWindow, asFull, atRatio, tc.sw, tc.full, tc.ratio)
		}
		for _, r := range []int64{withWindow, 32} {
			_, _, units := sized(sdk.HostFacts{MaxRunningRequests: r})
			served := min(r, units["full"]/ctx, units["swa"]/perWindow)
			t.Logf("%s, chunk %d: kvhost's split for %d running requests: %d full-pool and %d window-pool tokens: %d sequences",
				tc.name, tc.chunk, r, units["full"], units["swa"], served)
			if want := map[bool]int64{true: tc.sw, false: tc.defaultRun}[r == withWindow]; served != want {
				t.Errorf("%s, chunk %d: %d sequences with kvhost's split for %d running requests, want %d", tc.name, tc.chunk, served, r, want)
			}
		}
	}
}
