package plan

import (
	"testing"

	"github.com/kvhost/kvhost/host/model/synth"
)

// TestDecodeBytesActiveParams counts the weights one decoded token reads
// for gen-model's expert presets by hand from their shapes — the active
// parameters: one embedding row, attention (DeepSeek's latent projections,
// V3's q_lora), the router, top-k of the routed experts, the shared
// experts, the dense layers, the norms and the LM head, 4 bytes each in
// f32 — and checks DecodeBytes over the tensors the loader asks for.
func TestDecodeBytesActiveParams(t *testing.T) {
	for _, arch := range []string{"qwen3moe", "deepseek2", "deepseek3"} {
		for _, size := range []string{"tiny", "small", "medium"} {
			s, err := synth.ArchPreset(arch, size, "f32")
			if err != nil {
				t.Fatal(err)
			}
			c := specConfig(t, arch, s, s.Hidden/s.Heads)
			ts, err := WeightTensors(c, DenseMatrices(4))
			if err != nil {
				t.Fatal(err)
			}
			h, m, e := int64(s.Hidden), s.MoE, s.MLA
			E, K, I := int64(m.Experts), int64(m.TopK), int64(m.ExpertFF)
			n := h + h + int64(s.Vocab)*h // embedding row, output norm, LM head
			for l := range s.Layers {
				n += 2 * h // attention and FFN norms
				switch arch {
				case "qwen3moe":
					hd := int64(s.Hidden / s.Heads)
					n += 2*int64(s.Heads)*hd*h + 2*int64(s.KVHeads)*hd*h + 2*hd
				default:
					heads, qk := int64(s.Heads), int64(e.Nope+e.Rope)
					if e.QLora > 0 {
						n += h*int64(e.QLora) + int64(e.QLora) + int64(e.QLora)*heads*qk
					} else {
						n += h * heads * qk
					}
					n += h*int64(e.KVLora+e.Rope) + int64(e.KVLora) + heads*int64(e.Nope+e.V)*int64(e.KVLora) + heads*int64(e.V)*h
				}
				if l < m.FirstDense {
					n += 3 * h * int64(s.Intermediate)
					continue
				}
				n += E*h + K*3*h*I + 3*h*int64(m.Shared)*I
				if m.Sigmoid {
					n += E // selection bias
				}
			}
			d := DecodeBytes(c, ts)
			if d.Bytes != 4*n || d.ExpertsUsed != m.TopK || d.Experts != m.Experts {
				t.Errorf("%s-%s: %d B per token (%d of %d experts), hand count %d B", arch, size, d.Bytes, d.ExpertsUsed, d.Experts, 4*n)
			}
			t.Logf("%s-%s: %d of %d B read per decoded token (%.1f%%)", arch, size, d.Bytes, d.TotalBytes, 100*float64(d.Bytes)/float64(d.TotalBytes))
		}
	}
	// A dense model reads everything but the embedding's other rows; a
	// tied one reads its embedding whole as the LM head.
	_, c, ts, err := LoadModel("testdata/llama-3-8b.config.json")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, x := range ts {
		total += x.Bytes
	}
	embd := int64(c.Vocab) * int64(c.Hidden) * 2
	if d := DecodeBytes(c, ts); d.Bytes != total-embd+embd/int64(c.Vocab) || d.Experts != 0 {
		t.Errorf("llama-3-8b: %+v, want %d", d, total-embd+embd/int64(c.Vocab))
	}
	var tied []Tensor
	for _, x := range ts {
		if x.Name != "output.weight" {
			tied = append(tied, x)
		}
	}
	if d := DecodeBytes(c, tied); d.Bytes != total-embd+embd/int64(c.Vocab) {
		t.Errorf("tied: %d B, want %d", d.Bytes, total-embd+embd/int64(c.Vocab))
	}
}
