package plan

import (
	"fmt"

	"github.com/kvhost/kvhost/host/model"
)

// Tensor is one weight upload: its canonical (GGUF) name and the bytes the
// loader allocates for it.
type Tensor struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// MatrixBytes returns the stored size of a matrix tensor (canonical name
// and the shape the architecture loads it at), or ok=false when the file
// lacks it.
type MatrixBytes func(t model.TensorShape) (n int64, ok bool)

// WeightTensors lists the allocations host/model's loader makes, in load
// order: the tensors the architecture's own Layers code asks for in a dry
// build (model.Model.Tensors), matrices at their stored size, vectors
// converted to F32 (4 bytes per element).
func WeightTensors(c model.Config, matrix MatrixBytes) ([]Tensor, error) {
	d, err := newDryRun(c, nil, 0, 1, "weights")
	if err != nil {
		return nil, err
	}
	var out []Tensor
	for _, t := range d.m.Tensors() {
		if t.Vector {
			out = append(out, Tensor{t.Name, int64(t.Cols) * 4})
			continue
		}
		n, ok := matrix(t)
		if !ok {
			return nil, fmt.Errorf("plan: tensor %s is missing", t.Name)
		}
		out = append(out, Tensor{t.Name, n})
	}
	return out, nil
}

// DenseMatrices sizes matrices from their shapes at elemBytes per element,
// for a config.json without weights.
func DenseMatrices(elemBytes float64) MatrixBytes {
	return func(t model.TensorShape) (int64, bool) {
		return int64(float64(int64(t.Rows)*int64(t.Cols)) * elemBytes), true
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

// DecodeRead is the weight bytes one decoded token reads (batch 1): every
// tensor once, except the token embedding (one row; the whole matrix again
// when the LM head is tied to it) and the stacked experts (used/experts of
// each: a token runs its top-k). Bytes are as loaded (Tensor.Bytes: the
// file's matrix types, vectors in f32), so Bytes × tokens/s is the
// weight bandwidth a decode benchmark reaches.
type DecodeRead struct {
	Bytes      int64 `json:"bytes_per_token"`
	TotalBytes int64 `json:"total_bytes"`
	// ExpertsUsed of Experts per MoE layer (0 of 0: dense).
	ExpertsUsed int `json:"experts_used,omitempty"`
	Experts     int `json:"experts,omitempty"`
}

// DecodeBytes is c's DecodeRead over its loaded tensors ts
// (model.Config.TokenReadBytes per tensor).
func DecodeBytes(c model.Config, ts []Tensor) DecodeRead {
	d := DecodeRead{}
	d.ExpertsUsed, d.Experts = c.ExpertsPerToken()
	tied := true
	for _, t := range ts {
		tied = tied && t.Name != "output.weight"
	}
	for _, t := range ts {
		d.TotalBytes += t.Bytes
		d.Bytes += c.TokenReadBytes(t.Name, t.Bytes, tied)
	}
	return d
}
