package model

import (
	"fmt"
	"strings"

	"github.com/kvhost/kvhost/host/device"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// Fused expert tensors: one 3-D tensor per layer and projection instead of
// one matrix per expert. Two checkpoint families write them:
//   - transformers ≥ 5 (Qwen3-MoE, DeepSeek-V2/V3 and the models sharing
//     their experts module): mlp.experts.gate_up_proj [E, 2·ff, hidden] and
//     mlp.experts.down_proj [E, hidden, ff], no ".weight" suffix;
//   - Granite (GraniteMoe, GraniteMoeHybrid): block_sparse_moe.input_linear
//     .weight [E, 2·ff, hidden] and output_linear.weight [E, hidden, ff].
// Both split gate_up with chunk(2, dim=-1): each expert's first ff rows are
// the gate, the next ff the up projection (concatenated halves, unlike
// gpt-oss's interleaved gate_up_proj [E, hidden, 2·ff], arch_ossload.go).
// down_proj/output_linear [E, hidden, ff] is already the GGUF stack
// {ff, hidden, E}.

// fusedExperts reads a stacked expert tensor (canonical ffn_{gate,up,down}
// _exps.weight) from the fused tensors named gateUp and down, ok=false
// when they are absent.
func (s hfSource) fusedExperts(canon, gateUp, down string) ([]byte, device.DType, []int, bool, error) {
	switch {
	case strings.HasSuffix(canon, ".ffn_gate_exps.weight"):
		return s.expertHalf(gateUp, 0)
	case strings.HasSuffix(canon, ".ffn_up_exps.weight"):
		return s.expertHalf(gateUp, 1)
	case strings.HasSuffix(canon, ".ffn_down_exps.weight"):
		raw, typ, dims, ok, err := s.named(down)
		if ok && err == nil && len(dims) != 3 {
			err = fmt.Errorf("model: %s: tensor %s has %d dimensions, want [experts, hidden, ff]", s.path, down, len(dims))
		}
		return raw, typ, dims, ok, err
	}
	return nil, 0, nil, false, nil
}

// tf5Experts is fusedExperts under transformers 5's names for a canonical
// blk.N.ffn_*_exps.weight.
func (s hfSource) tf5Experts(canon string) ([]byte, device.DType, []int, bool, error) {
	layer, _, _ := strings.Cut(strings.TrimPrefix(canon, "blk."), ".")
	p := "model.layers." + layer + ".mlp.experts."
	return s.fusedExperts(canon, p+"gate_up_proj", p+"down_proj")
}

// expertHalf reads half (0: gate, 1: up) of every expert's rows of a fused
// gate/up tensor [E, 2·ff, in] as the GGUF stack {in, ff, E}.
func (s hfSource) expertHalf(name string, half int) ([]byte, device.DType, []int, bool, error) {
	raw, typ, dims, ok, err := s.named(name)
	if !ok || err != nil {
		return nil, 0, nil, ok, err
	}
	if len(dims) != 3 || dims[1]%2 != 0 {
		return nil, 0, nil, false, fmt.Errorf("model: %s: tensor %s has shape %v (row length first); want [experts, 2·ff, hidden] with gate rows then up rows per expert", s.path, name, dims)
	}
	in, rows, E := dims[0], dims[1], dims[2]
	rb, err := kcpu.DType(typ).RowBytes(in)
	if err != nil {
		return nil, 0, nil, false, fmt.Errorf("model: %s: tensor %s: %w", s.path, name, err)
	}
	ff := rows / 2
	if len(raw) != E*rows*rb {
		return nil, 0, nil, false, fmt.Errorf("model: %s: tensor %s holds %d bytes, want %d", s.path, name, len(raw), E*rows*rb)
	}
	out := make([]byte, E*ff*rb)
	for e := range E {
		src := (e*rows + half*ff) * rb
		copy(out[e*ff*rb:(e+1)*ff*rb], raw[src:src+ff*rb])
	}
	return out, typ, []int{in, ff, E}, true, nil
}

// hybridHFRead is the hybrids' Arch.HFRead: Granite-4.0-H reads its experts
// from block_sparse_moe's fused tensors; Nemotron-H needs none.
var hybridHFRead = map[string]func(hfSource, string) ([]byte, device.DType, []int, bool, error){
	"granitehybrid": func(s hfSource, canon string) ([]byte, device.DType, []int, bool, error) {
		if strings.HasSuffix(canon, "_exps.weight") {
			layer, _, _ := strings.Cut(strings.TrimPrefix(canon, "blk."), ".")
			p := "blk." + layer + "."
			return s.fusedExperts(canon, hybridHFName("granitehybrid", p+"ffn_up_exps.weight"), hybridHFName("granitehybrid", p+"ffn_down_exps.weight"))
		}
		return s.named(hybridHFName("granitehybrid", canon))
	},
}

// ossDenseExperts reads gpt-oss's experts from an unquantized checkpoint
// (bf16 or f32, "dequantized"): gate_up_proj [E, hidden, 2·ff] with the
// gate in the even and up in the odd columns, down_proj [E, ff, hidden] —
// multiplied as x·W, so each expert's matrix is the transpose of
// nn.Linear's. parity 0/1 takes gate/up's columns, −1 every column (down);
// the result is the GGUF stack {in, out, E}.
func (s hfSource) ossDenseExperts(name string, parity int) ([]byte, device.DType, []int, bool, error) {
	raw, typ, dims, ok, err := s.named(name)
	if !ok || err != nil {
		return nil, 0, nil, ok, err
	}
	if len(dims) != 3 || (parity >= 0 && dims[0]%2 != 0) {
		return nil, 0, nil, false, fmt.Errorf("model: %s: tensor %s has shape %v (row length first); want [experts, in, out] with an even out for gate_up_proj", s.path, name, dims)
	}
	cols, in, E := dims[0], dims[1], dims[2]
	es, err := kcpu.DType(typ).RowBytes(1)
	if err != nil || len(raw) != E*in*cols*es {
		return nil, 0, nil, false, fmt.Errorf("model: %s: tensor %s: %d bytes for %v %s", s.path, name, len(raw), dims, typ)
	}
	rows, stride, off := cols, 1, 0
	if parity >= 0 {
		rows, stride, off = cols/2, 2, parity
	}
	out := make([]byte, E*rows*in*es)
	for e := range E {
		for r := range rows {
			c := off + r*stride
			dst := out[(e*rows+r)*in*es:]
			for i := range in {
				src := ((e*in+i)*cols + c) * es
				copy(dst[i*es:(i+1)*es], raw[src:src+es])
			}
		}
	}
	return out, typ, []int{in, rows, E}, true, nil
}
