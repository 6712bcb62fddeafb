package synth

import (
	"fmt"
	"testing"

	"github.com/kvhost/kvhost/host/model/gguf"
)

// TestMixture checks the per-tensor types of llama-quantize's mixes on an
// 8-layer model with 4 query heads per KV head, as llama_tensor_get_type
// picks them: use_more_bits(i, 8) holds for layers 0, 3, 6 and 7.
func TestMixture(t *testing.T) {
	const (
		Q2K, Q3K, Q4K, Q5K, Q6K = gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K
	)
	more := map[int]bool{0: true, 3: true, 6: true, 7: true}
	for _, c := range []struct {
		dtype               string
		embd, out, q, o, up gguf.TensorType
		v, down             func(i int) gguf.TensorType
	}{
		{"q4_k_m", Q4K, Q6K, Q4K, Q4K, Q4K,
			func(i int) gguf.TensorType { return pick(more[i], Q6K, Q4K) },
			func(i int) gguf.TensorType { return pick(more[i], Q6K, Q4K) }},
		{"q5_k_m", Q5K, Q6K, Q5K, Q5K, Q5K,
			func(i int) gguf.TensorType { return pick(more[i], Q6K, Q5K) },
			func(i int) gguf.TensorType { return pick(more[i], Q6K, Q5K) }},
		{"q4_k_s", Q4K, Q6K, Q4K, Q4K, Q4K,
			func(i int) gguf.TensorType { return pick(i < 4, Q5K, Q4K) },
			func(i int) gguf.TensorType { return pick(i < 1, Q5K, Q4K) }},
		{"q3_k_m", Q3K, Q6K, Q3K, Q4K, Q3K,
			func(i int) gguf.TensorType { return pick(i < 2, Q5K, Q4K) },
			func(i int) gguf.TensorType { return Q4K }}, // i < 8/16 never holds
		{"q2_k", Q2K, Q6K, Q2K, Q3K, Q2K,
			func(int) gguf.TensorType { return Q4K }, // 4 query heads per KV head
			func(int) gguf.TensorType { return Q3K }},
		{"iq4_xs", gguf.TypeIQ4_XS, Q6K, gguf.TypeIQ4_XS, gguf.TypeIQ4_XS, gguf.TypeIQ4_XS,
			func(int) gguf.TensorType { return Q5K },
			func(i int) gguf.TensorType { return pick(i < 1, Q5K, gguf.TypeIQ4_XS) }},
		{"q8_0", gguf.TypeQ8_0, gguf.TypeQ8_0, gguf.TypeQ8_0, gguf.TypeQ8_0, gguf.TypeQ8_0,
			func(int) gguf.TensorType { return gguf.TypeQ8_0 },
			func(int) gguf.TensorType { return gguf.TypeQ8_0 }},
		{"q4_0", gguf.TypeQ4_0, Q6K, gguf.TypeQ4_0, gguf.TypeQ4_0, gguf.TypeQ4_0,
			func(int) gguf.TensorType { return gguf.TypeQ4_0 },
			func(int) gguf.TensorType { return gguf.TypeQ4_0 }},
	} {
		t.Run(c.dtype, func(t *testing.T) {
			got := types(t, wide(c.dtype))
			want := map[string]gguf.TensorType{"token_embd.weight": c.embd, "output.weight": c.out}
			for i := range 8 {
				p := fmt.Sprintf("blk.%d.", i)
				want[p+"attn_q.weight"], want[p+"attn_k.weight"], want[p+"attn_output.weight"] = c.q, c.q, c.o
				want[p+"ffn_gate.weight"], want[p+"ffn_up.weight"] = c.up, c.up
				want[p+"attn_v.weight"], want[p+"ffn_down.weight"] = c.v(i), c.down(i)
			}
			for name, w := range want {
				if got[name] != w {
					t.Errorf("%s: %v, want %v", name, got[name], w)
				}
			}
		})
	}
	// Rows no K-quant block divides fall back: 64-wide rows take Q5_0 for
	// Q4_K, Q8_0 for Q6_K (the output, and the V rows of layer 1 of 2, the
	// last eighth).
	got := types(t, small("q4_k_m"))
	if got["blk.0.attn_q.weight"] != gguf.TypeQ5_0 || got["output.weight"] != gguf.TypeQ8_0 || got["blk.1.attn_v.weight"] != gguf.TypeQ8_0 {
		t.Errorf("fallbacks: q %v, output %v, v %v", got["blk.0.attn_q.weight"], got["output.weight"], got["blk.1.attn_v.weight"])
	}
}

func pick(c bool, a, b gguf.TensorType) gguf.TensorType {
	if c {
		return a
	}
	return b
}

func types(t *testing.T, s Spec) map[string]gguf.TensorType {
	t.Helper()
	_, plans, err := layout(s)
	if err != nil {
		t.Fatal(err)
	}
	_, ft, err := lookupFType(s.DType)
	if err != nil {
		t.Fatal(err)
	}
	mx := &mixture{f: ft, gqa: s.Heads / s.KVHeads, layers: s.Layers}
	out := map[string]gguf.TensorType{}
	for _, p := range plans {
		if !p.vec {
			out[p.name] = mx.typeOf(p)
		}
	}
	return out
}
