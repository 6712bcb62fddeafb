package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/model/safetensors"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// ossTensor reads a gpt-oss checkpoint's tensor by canonical (GGUF) name,
// doing what llama.cpp's converter does (docs/architectures/gpt-oss.md,
// "Tensors"): renames, the interleaved gate_up projection split into even
// (gate) and odd (up) rows, MXFP4 *_blocks/*_scales repacked into GGML
// MXFP4 blocks (the same bytes, the kernels' layout) as [in, out, E] stacks.
func (s hfSource) ossTensor(canon string) ([]byte, device.DType, []int, bool, error) {
	rest, ok := strings.CutPrefix(canon, "blk.")
	if !ok {
		return s.named(hfName(canon))
	}
	layer, part, _ := strings.Cut(rest, ".")
	pre := "model.layers." + layer + "."
	switch part {
	case "post_attention_norm.weight":
		return s.named(pre + "post_attention_layernorm.weight")
	case "attn_sinks.weight":
		return s.named(pre + "self_attn.sinks")
	case "attn_output.bias":
		return s.named(pre + "self_attn.o_proj.bias")
	case "ffn_gate_inp.weight":
		return s.named(pre + "mlp.router.weight")
	case "ffn_gate_inp.bias":
		return s.named(pre + "mlp.router.bias")
	case "ffn_gate_exps.weight":
		return s.ossExperts(pre+"mlp.experts.gate_up_proj", 0)
	case "ffn_up_exps.weight":
		return s.ossExperts(pre+"mlp.experts.gate_up_proj", 1)
	case "ffn_down_exps.weight":
		return s.ossExperts(pre+"mlp.experts.down_proj", -1)
	case "ffn_gate_exps.bias":
		return s.ossBias(pre+"mlp.experts.gate_up_proj_bias", 0)
	case "ffn_up_exps.bias":
		return s.ossBias(pre+"mlp.experts.gate_up_proj_bias", 1)
	case "ffn_down_exps.bias":
		return s.ossBias(pre+"mlp.experts.down_proj_bias", -1)
	}
	return s.named(hfName(canon))
}

// ossExperts repacks base_blocks [E, R, G, 16] and base_scales [E, R, G]
// (U8) into GGML MXFP4 [E, rows, G·32] (17 bytes per 32 values, what the
// two tensors hold together): every row (parity −1) or the rows of one
// parity of the interleaved gate_up projection.
func (s hfSource) ossExperts(base string, parity int) ([]byte, device.DType, []int, bool, error) {
	bi, blocks, err := s.u8(base + "_blocks")
	if err != nil || bi == nil {
		if _, dense := s.set.Info(base); err == nil && dense {
			return s.ossDenseExperts(base, parity) // load_hf_fused.go
		}
		return nil, 0, nil, false, err
	}
	si, scales, err := s.u8(base + "_scales")
	if err != nil {
		return nil, 0, nil, false, err
	}
	if si == nil || len(bi.Shape) != 4 || bi.Shape[3] != 16 || len(si.Shape) != 3 ||
		si.Shape[0] != bi.Shape[0] || si.Shape[1] != bi.Shape[1] || si.Shape[2] != bi.Shape[2] {
		return nil, 0, nil, false, fmt.Errorf("model: %s: %s_blocks %v and _scales want [E, rows, groups, 16] and [E, rows, groups]", s.path, base, bi.Shape)
	}
	E, R, G := int(bi.Shape[0]), int(bi.Shape[1]), int(bi.Shape[2])
	rows := R
	if parity >= 0 {
		if R%2 != 0 {
			return nil, 0, nil, false, fmt.Errorf("model: %s: %s_blocks has %d rows; the interleaved gate_up needs an even number", s.path, base, R)
		}
		rows = R / 2
	}
	rb := G * kcpu.MXFP4BlockBytes
	out := make([]byte, E*rows*rb)
	for e := 0; e < E; e++ {
		for r := 0; r < rows; r++ {
			src := r
			if parity >= 0 {
				src = 2*r + parity
			}
			row := e*R + src
			dst := out[(e*rows+r)*rb : (e*rows+r+1)*rb]
			if err := kcpu.MXFP4FromHF(dst, blocks[row*G*16:(row+1)*G*16], scales[row*G:(row+1)*G]); err != nil {
				return nil, 0, nil, false, fmt.Errorf("model: %s: %s: %w", s.path, base, err)
			}
		}
	}
	return out, device.MXFP4, []int{G * 32, rows, E}, true, nil
}

// u8 reads a U8 tensor (nil info when absent).
func (s hfSource) u8(name string) (*safetensors.TensorInfo, []byte, error) {
	if _, ok := s.set.Info(name); !ok {
		return nil, nil, nil
	}
	ti, raw, err := s.set.Tensor(name)
	if err != nil {
		return nil, nil, fmt.Errorf("model: %s: %w", s.path, err)
	}
	if ti.DType != safetensors.U8 {
		return nil, nil, fmt.Errorf("model: %s: %s has dtype %s, want U8", s.path, name, ti.DType)
	}
	return &ti, raw, nil
}

// ossBias reads an expert bias [E, n] (F32, F16 or BF16) as F32 [n, E]
// canonical dims, keeping one parity of an interleaved gate_up bias.
func (s hfSource) ossBias(name string, parity int) ([]byte, device.DType, []int, bool, error) {
	raw, typ, dims, ok, err := s.named(name)
	if !ok || err != nil {
		return nil, 0, nil, ok, err
	}
	if len(dims) != 2 {
		return nil, 0, nil, false, fmt.Errorf("model: %s: %s has shape %v, want [E, n]", s.path, name, dims)
	}
	n, E := dims[0], dims[1]
	f, err := toF32(raw, typ)
	if err != nil {
		return nil, 0, nil, false, fmt.Errorf("model: %s: %s: %w", s.path, name, err)
	}
	if parity >= 0 {
		if n%2 != 0 {
			return nil, 0, nil, false, fmt.Errorf("model: %s: %s has %d values per expert; the interleaved gate_up needs an even number", s.path, name, n)
		}
		half := make([]float32, 0, len(f)/2)
		for i := parity; i < len(f); i += 2 {
			half = append(half, f[i])
		}
		f, n = half, n/2
	}
	out := make([]byte, 4*len(f))
	for i, v := range f {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out, device.F32, []int{n, E}, true, nil
}

// toF32 widens F32, F16 or BF16 values.
func toF32(raw []byte, typ device.DType) ([]float32, error) {
	switch typ {
	case device.F32:
		out := make([]float32, len(raw)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return out, nil
	case device.F16, device.BF16:
		out := make([]float32, len(raw)/2)
		for i := range out {
			h := binary.LittleEndian.Uint16(raw[2*i:])
			if typ == device.F16 {
				out[i] = kcpu.F16ToF32(h)
			} else {
				out[i] = kcpu.BF16ToF32(h)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("dtype %s, want f32, f16 or bf16", typ)
}

// HFQuantizedBytes is what the Hugging Face loader keeps for matrix t of a
// model c when the checkpoint stores it quantized rather than in its dense
// dtype, as config.json's quantization_config.quant_method (quant) says:
// gpt-oss's "mxfp4" experts arrive as *_blocks/*_scales and stay MXFP4 (17
// bytes per 32 values, ossExperts). ok is false for a dense matrix. Plan
// sizes a Hugging Face model's weights by it.
func HFQuantizedBytes(c Config, quant string, t TensorShape) (n int64, ok bool) {
	if c.Arch != "gpt-oss" || quant != "mxfp4" || !strings.HasSuffix(t.Name, "_exps.weight") {
		return 0, false
	}
	rb, err := kcpu.MXFP4.RowBytes(t.Cols)
	return int64(rb) * int64(t.Rows), err == nil
}
