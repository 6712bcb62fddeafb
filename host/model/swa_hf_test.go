package model

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
)

// TestSWAGGUFAndHFAgree: the GGUF file and the Hugging Face checkpoint
// ExportHF writes of it (the one gen-model --format hf writes) load to the same configuration and give the same
// logits over a prefill past the window and decode steps: bit for bit
// where the files hold the same values in the same layout (Gemma, gpt-oss:
// measured 0), within 1e-5 relative for Mistral, whose GGUF rotates
// permuted q/k rows in adjacent pairs where HF rotates halves (same values,
// another summation order; measured 1.3e-6).
func TestSWAGGUFAndHFAgree(t *testing.T) {
	for _, a := range swaArchs {
		t.Run(a.arch, func(t *testing.T) {
			path := writeBPE(t, a.arch, "tiny")
			g := loadSWA(t, path, a.hf, 32)
			h := loadSWA(t, exportHF(t, path), a.hf, 32)
			gc, hc := g.m.Config, h.m.Config
			// GGUF names Mistral "llama" and stores its q/k permuted for
			// adjacent-pair rotation; HF rotates halves of unpermuted rows.
			gc.Arch, hc.Arch, gc.Rope.Neox = "", "", hc.Rope.Neox
			gj, _ := json.Marshal(gc)
			hj, _ := json.Marshal(hc)
			if !bytes.Equal(gj, hj) {
				t.Fatalf("configs differ:\ngguf %s\nhf   %s", gj, hj)
			}
			prompt := make([]int32, 30)
			for i := range prompt {
				prompt[i] = int32(3 + i*37%250)
			}
			gs, hs := &swaSeq{r: g}, &swaSeq{r: h}
			defer gs.release()
			defer hs.release()
			V := gc.Vocab
			worst := 0.0
			gl, hl := gs.forward(t, prompt, 0, len(prompt)), hs.forward(t, prompt, 0, len(prompt))
			for pos := len(prompt); ; pos++ {
				for r := 0; r < len(gl)/V; r++ {
					want := make([]float64, V)
					for i, v := range gl[r*V : (r+1)*V] {
						want[i] = float64(v)
					}
					worst = math.Max(worst, relDiff(hl[r*V:(r+1)*V], want))
				}
				if pos == len(prompt)+20 {
					break
				}
				next := int32(argmax32(gl[len(gl)-V:]))
				gl, hl = gs.forward(t, []int32{next}, pos, 1), hs.forward(t, []int32{next}, pos, 1)
			}
			if worst > 1e-5 {
				t.Fatalf("HF logits differ from GGUF's by %g relative", worst)
			}
			t.Logf("%s: HF and GGUF logits differ by at most %.2g relative", a.arch, worst)
		})
	}
}
