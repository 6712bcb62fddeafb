package budget

import "testing"

// TestRuntimeV9toV11 reproduces the §7 runtime vectors for Llama-3-8B
// (8192-token prefill, bf16) and DeepSeek-V3 MoE.
func TestRuntimeV9toV11(t *testing.T) {
	const T = 8192
	th := int64(T * llamaH * 2)
	if th != 67108864 {
		t.Fatalf("[T,H] = %d", th)
	}
	// Reference tensor-by-tensor sums (§4 lists the live set).
	gateUp := int64(T * 2 * llamaI * 2)
	act := int64(T * llamaI * 2)
	qkv := int64(T * (32 + 2*8) * 128 * 2)
	tests := []struct {
		name string
		got  int64
		want int64
	}{
		{"gate_up", gateUp, 469762048},
		{"act", act, 234881024},
		{"MLP intermediates", MLPIntermediates(T, llamaI, 2), 704643072},
		{"MLP intermediates = gate_up + act", MLPIntermediates(T, llamaI, 2), gateUp + act},
		{"MLP + residual = 736 MiB", MLPIntermediates(T, llamaI, 2) + th, 736 * MiB},
		{"dense layer peak", DenseLayerPeak(T, llamaH, llamaI, 2), 973078528},
		{"dense layer peak = 928 MiB", DenseLayerPeak(T, llamaH, llamaI, 2), 928 * MiB},
		{"dense layer peak tensor sum", DenseLayerPeak(T, llamaH, llamaI, 2), 4*th + gateUp + act},
		{"attention moment", AttentionPeak(T, llamaH, 32, 8, 128, 2), 352 * MiB},
		{"attention moment tensor sum", AttentionPeak(T, llamaH, 32, 8, 128, 2), 4*th + qkv},
		{"LM head unpruned", LMHeadPeak(T, llamaV, llamaH, 2), 6371147776},
		{"LM head unpruned parts", LMHeadPeak(T, llamaV, llamaH, 2), 2101346304 + 4202692608 + 64*MiB},
		{"LM head 1 request", LMHeadPeak(1, llamaV, llamaH, 2), 1*llamaV*6 + llamaH*2},
		{"LM head 8 requests", LMHeadPeak(8, llamaV, llamaH, 2), 4104192 + 2052096 + 8*llamaH*2},
		{"logprob chunk 2048", LogprobPeak(T, LogprobChunkSize, llamaV, 2, false), 1576009728},
		{"logprob chunk 2048 = 1503 MiB", LogprobPeak(T, LogprobChunkSize, llamaV, 2, false) / MiB, 1503},
		{"logprob chunk + log-softmax = 2505 MiB", LogprobPeak(T, LogprobChunkSize, llamaV, 2, true) / MiB, 2505},
		{"logprob unchunked = 6012 MiB", LogprobPeak(T, 0, llamaV, 2, false) / MiB, 6012},
		{"logprob rows below chunk", LogprobPeak(100, LogprobChunkSize, llamaV, 2, false), 100 * llamaV * 6},
		{"V10 graph-shared logits", GraphSharedLogits(256, llamaV, 1), 131334144},
		{"V10 per-bucket logits", sumBuckets(DecodeCaptureBatches(256), llamaV), 2176760832},
		{"V11 MoE cache", MoECache(8192, 8, 512, 7168, 2), 928 * MiB},
		{"V11 MoE shared buffer", MoECache(8192, 8, 512, 7168, 2) - int64(8192*8*256*2), 939524096},
		{"MoE chunk bound", MoECache(1<<20, 8, 512, 7168, 2), MoECache(MoEChunkTokens, 8, 512, 7168, 2)},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
	// Pruned FP32 logits: 1 request 513 024 B, 8 requests 4 104 192 B = 3.914 MiB.
	if fp32 := int64(1 * llamaV * 4); fp32 != 513024 {
		t.Errorf("1-request FP32 logits = %d", fp32)
	}
	if v := float64(8*llamaV*4) / MiB; pyRound(v, 3) != 3.914 {
		t.Errorf("8-request FP32 logits = %v MiB", v)
	}
	if g := float64(LMHeadPeak(T, llamaV, llamaH, 2)) / GiB; pyRound(g, 3) != 5.934 {
		t.Errorf("LM head = %v GiB, want 5.934", g)
	}
	if g := float64(MLPIntermediates(T, llamaI, 2)+th) / GiB; pyRound(g, 3) != 0.719 {
		t.Errorf("MLP + residual = %v GiB, want 0.719", g)
	}
}

func sumBuckets(bs []int, vocab int) int64 {
	var s int64
	for _, b := range bs {
		s += GraphSharedLogits(b, vocab, 1)
	}
	return s
}

// TestSamplingAndPenalties checks the decode-side buffers against their
// tensor shapes written out: softmax FP32, sort values FP32 and indices
// int64, cumsum FP32; two FP32 penalty accumulators.
func TestSamplingAndPenalties(t *testing.T) {
	const rows = 4096
	n := int64(rows) * llamaV
	s := Sampling(rows, llamaV)
	if s.Softmax != n*4 || s.SortValues != n*4 || s.SortIndices != n*8 || s.CumSum != n*4 || s.Total() != n*20 {
		t.Fatalf("sampling %+v total %d, want 4/4/8/4 bytes per entry of %d", s, s.Total(), n)
	}
	// 4096 rows of a 128k vocabulary: 10.5 GB of sampler temporaries.
	if s.Total() != 10506731520 {
		t.Fatalf("total %d", s.Total())
	}
	if PenaltyBuffers(rows, llamaV) != 2*n*4 {
		t.Fatalf("penalties %d", PenaltyBuffers(rows, llamaV))
	}
}
