package model

import (
	"testing"
)

// TestHybridHFMatchesGGUF: both hybrids loaded from the Hugging Face
// directory ExportHF writes of their GGUF files (A_log, conv [C, 1, K],
// Granite's fused input_linear, dense and per expert) give the logits their GGUF files
// give, at every position of a prefill and the decode steps after it.
func TestHybridHFMatchesGGUF(t *testing.T) {
	for _, arch := range hybridArchs { // granitehybrid-moe: block_sparse_moe's fused experts
		t.Run(arch, func(t *testing.T) {
			path := writeHybridBPE(t, arch, "tiny")
			g := hybridRig(t, path)
			h := hybridRig(t, exportHF(t, path))
			toks := make([]int32, 30)
			for i := range toks {
				toks[i] = int32(1 + (i*37)%250)
			}
			gs, hs := newHybridSeq(t, hybridPools(t, g, 2, 8, true)), newHybridSeq(t, hybridPools(t, h, 2, 8, true))
			a, b := gs.run(t, g.m, toks, len(toks)), hs.run(t, h.m, toks, len(toks))
			for i := range 5 {
				a = append(a, gs.run(t, g.m, toks[i:i+1], 1)...)
				b = append(b, hs.run(t, h.m, toks[i:i+1], 1)...)
			}
			if d := maxAbsDiff(a, b); d > 1e-4 {
				t.Fatalf("HF and GGUF logits differ by %g", d)
			}
		})
	}
}
