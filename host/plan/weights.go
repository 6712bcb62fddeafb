package plan

import (
	"fmt"
	"strings"

	"github.com/kvhost/kvhost/host/model"
)

// Tensor is one weight upload: its canonical (GGUF) name and the bytes the
// loader allocates for it.
type Tensor struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// MatrixBytes returns the stored size of a matrix tensor by canonical name,
// or ok=false when the file lacks it.
type MatrixBytes func(name string) (n int64, ok bool)

// WeightTensors lists the allocations host/model's loader makes, in load
// order (host/model/model.go build): matrices at their stored size, vectors
// converted to F32 (4 bytes per element).
func WeightTensors(c model.Config, matrix MatrixBytes) ([]Tensor, error) {
	var out []Tensor
	mat := func(name string) error {
		n, ok := matrix(name)
		if !ok {
			return fmt.Errorf("plan: tensor %s is missing", name)
		}
		out = append(out, Tensor{name, n})
		return nil
	}
	vec := func(name string, n int) { out = append(out, Tensor{name, int64(n) * 4}) }
	if err := mat("token_embd.weight"); err != nil {
		return nil, err
	}
	vec("output_norm.weight", c.Hidden)
	if !c.Tied {
		if err := mat("output.weight"); err != nil {
			return nil, err
		}
	}
	if c.Hybrid() != nil {
		for _, w := range model.HybridWeightAllocs(c) {
			if w.F32 {
				vec(w.Name, w.Rows*w.Cols)
			} else if err := mat(w.Name); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	for i := range c.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		vec(p+"attn_norm.weight", c.Hidden)
		for _, n := range []string{"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight"} {
			if err := mat(p + n); err != nil {
				return nil, err
			}
		}
		if c.QKVBias {
			vec(p+"attn_q.bias", c.QRow())
			vec(p+"attn_k.bias", c.KVRow())
			vec(p+"attn_v.bias", c.KVRow())
		}
		if c.QKNorm {
			vec(p+"attn_q_norm.weight", c.HeadDim)
			vec(p+"attn_k_norm.weight", c.HeadDim)
		}
		vec(p+"ffn_norm.weight", c.Hidden)
		for _, n := range []string{"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"} {
			if err := mat(p + n); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// DenseMatrices sizes matrices from the configuration at elemBytes per
// element, for a config.json without weights.
func DenseMatrices(c model.Config, elemBytes float64) MatrixBytes {
	h, q, kv, i, v := int64(c.Hidden), int64(c.QRow()), int64(c.KVRow()), int64(c.Intermediate), int64(c.Vocab)
	shapes := map[string]int64{
		"token_embd.weight": v * h, "output.weight": v * h,
		"attn_q.weight": q * h, "attn_k.weight": kv * h, "attn_v.weight": kv * h, "attn_output.weight": h * q,
		"ffn_gate.weight": i * h, "ffn_up.weight": i * h, "ffn_down.weight": h * i,
	}
	if hy := c.Hybrid(); hy != nil {
		s := hy.Mamba
		in, cd, heads := int64(s.Inner()), int64(s.ConvDim()), int64(s.Heads)
		shapes["ssm_in.weight"], shapes["ssm_out.weight"] = (in+cd+heads)*h, h*in
	}
	return func(name string) (int64, bool) {
		if i := strings.LastIndexByte(strings.TrimSuffix(name, ".weight"), '.'); i >= 0 {
			name = name[i+1:]
		}
		n, ok := shapes[name]
		return int64(float64(n) * elemBytes), ok
	}
}

// WeightCost is Σ requested bytes and Σ device cost (each allocation rounded
// to page bytes, ledger.DirectCost).
func WeightCost(ts []Tensor, page int64) (requested, device int64) {
	for _, t := range ts {
		requested += t.Bytes
		device += alignUp(t.Bytes, max(1, page))
	}
	return requested, device
}

// Reservations lists what the budget keeps out of the KV pool, SGLang's
// omissions included: on the CPU device the engine's request tables,
// logits rows and sampler scratch live in host memory and are listed as
// such.
func Reservations(c model.Config, b Budget) []Reservation {
	var kvBytes int64
	if b.KVConfigurator != nil {
		kvBytes = b.KVConfigurator.Layout.Bytes(b.Units)
	}
	rows := min(b.MaxRunning, b.ChunkedPrefill)
	out := []Reservation{
		{Name: "activation peak (profiled forward)", Bytes: b.ProfilePeakBytes, Device: true, Note: "caching-allocator segments at the chunk limit and the maximum batch"},
		{Name: "fragmentation allowance", Bytes: b.FragmentationBytes, Device: true, Note: "one more of the largest segment the profile needed"},
		{Name: "KV granule rounding", Bytes: b.KVMappedBytes - kvBytes, Device: true, Note: "mapping rounded up per buffer"},
		{Name: "request→token tables", Bytes: int64(b.MaxRunning+1) * int64((c.ContextLen+b.PageSize-1)/b.PageSize) * 4, Device: false, Note: "page tables, host memory on the CPU device"},
		{Name: "logits rows", Bytes: int64(rows) * int64(c.Vocab) * 4, Device: false, Note: "engine logits buffer, host memory"},
		{Name: "sampler and logprob scratch", Bytes: int64(c.Vocab) * 8, Device: false, Note: "one row at a time, host memory"},
	}
	if b.Policy == "sglang-compat" {
		out = out[2:3]
		out[0].Name, out[0].Note = "KV page rounding", "each buffer rounded to device pages"
	}
	return out
}
