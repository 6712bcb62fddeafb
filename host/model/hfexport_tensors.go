package model

import (
	"fmt"
	"math"
	"strings"

	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/safetensors"
)

// tensor converts one GGUF tensor into the Hugging Face tensors it came
// from. A pair the converter split (gate and up, kv_b's key and value
// halves) is written when its second member is met; the first returns
// nothing. Each case is the inverse of a read the loader does:
//
//   - names: the architecture's Arch.HFTensor (gpt-oss: ossHFName);
//   - Llama/Mistral q and k: llama.cpp permutes the rows for adjacent-pair
//     rotation, HF keeps the half-split order (unpermuted here; the loader
//     rotates HF files NeoX-style instead of permuting);
//   - Gemma norms: GGUF bakes the 1 of (1 + w) in, HF stores w (gemmaHFRead);
//   - qwen3moe/deepseek2 expert stacks: one HF matrix per expert
//     (hfSource.experts); DeepSeek's attn_k_b/attn_v_b: fused kv_b_proj
//     (splitKVB);
//   - gpt-oss: gate and up re-interleaved into gate_up_proj (and its bias),
//     MXFP4 as HF's *_blocks/*_scales (hfSource.ossTensor);
//   - Mamba-2: A_log = log(−A), conv1d [C, 1, K], D and the gated norm flat;
//     Granite's gate and up fused into input_linear (arch_hybrid_load.go).
func (x *hfExporter) tensor(ti gguf.TensorInfo) ([]safetensors.Tensor, error) {
	c, canon := x.c, ti.Name
	layer, part := layerPart(canon)
	switch c.Arch {
	case "gpt-oss":
		return x.ossTensor(ti, layer, part)
	case "qwen3moe", "deepseek2":
		if proj := hfExpertProj[part]; proj != "" {
			return x.perExpert(ti, layer, proj)
		}
		switch part {
		case "attn_v_b.weight":
			return nil, nil
		case "attn_k_b.weight":
			return x.fusedKVB(layer)
		}
	case "nemotron_h", "granitehybrid":
		return x.hybridTensor(ti, layer, part)
	}
	_, raw, dt, err := x.read(canon)
	if err != nil {
		return nil, err
	}
	shape := hfShape(ti.Dims)
	if (c.Arch == "llama" || c.Arch == "mistral") && !c.Rope.Neox && (part == "attn_q.weight" || part == "attn_k.weight") {
		raw = halfSplit(raw, int(ti.Dims[1])/c.HeadDim, c.HeadDim, len(raw)/int(ti.Dims[1]))
	}
	if s := SWAOf(c); s != nil && s.Gemma && strings.HasSuffix(canon, "norm.weight") {
		if dt != safetensors.F32 {
			return nil, fmt.Errorf("a Gemma norm stored as %s (want F32)", dt)
		}
		v := floatsOf(raw)
		for i := range v {
			v[i]--
		}
		raw = floatBytes(v)
	}
	return []safetensors.Tensor{{Name: archOf(c).HFTensor(canon), DType: dt, Shape: shape, Data: raw}}, nil
}

// archOf is c's registry entry (c came from ConfigFromGGUF, so it exists).
func archOf(c Config) *Arch {
	a, err := c.arch()
	if err != nil {
		panic(err)
	}
	return a
}

// halfSplit turns llama.cpp's adjacent-pair q/k row order back into HF's
// half-split order: HF row h·hd + j·hd/2 + i holds GGUF row h·hd + 2i + j.
func halfSplit(data []byte, heads, hd, rowBytes int) []byte {
	out := make([]byte, len(data))
	for h := 0; h < heads; h++ {
		for i := 0; i < hd/2; i++ {
			for j := 0; j < 2; j++ {
				src := (h*hd + 2*i + j) * rowBytes
				dst := (h*hd + j*hd/2 + i) * rowBytes
				copy(out[dst:dst+rowBytes], data[src:src+rowBytes])
			}
		}
	}
	return out
}

// perExpert splits a GGUF expert stack {cols, rows, E} into HF's
// model.layers.N.mlp.experts.J.<proj>.weight [rows, cols].
func (x *hfExporter) perExpert(ti gguf.TensorInfo, layer, proj string) ([]safetensors.Tensor, error) {
	_, raw, dt, err := x.read(ti.Name)
	if err != nil {
		return nil, err
	}
	if len(ti.Dims) != 3 {
		return nil, fmt.Errorf("dims %v: want {cols, rows, experts}", ti.Dims)
	}
	cols, rows, E := ti.Dims[0], ti.Dims[1], int(ti.Dims[2])
	n := len(raw) / E
	out := make([]safetensors.Tensor, E)
	for j := range out {
		out[j] = safetensors.Tensor{Name: fmt.Sprintf("model.layers.%s.mlp.experts.%d.%s.weight", layer, j, proj),
			DType: dt, Shape: []uint64{rows, cols}, Data: raw[j*n : (j+1)*n]}
	}
	return out, nil
}

// fusedKVB rebuilds DeepSeek's kv_b_proj [heads·(nope+v), kv_lora_rank]
// from the split attn_k_b {nope, rank, heads} (each head's W_UK
// transposed) and attn_v_b {rank, v, heads}: per head, the nope rows of
// W_UK, then the v rows of W_UV (what splitKVB reads).
func (x *hfExporter) fusedKVB(layer string) ([]safetensors.Tensor, error) {
	p := "blk." + layer + "."
	kt, kb, dt, err := x.read(p + "attn_k_b.weight")
	if err != nil {
		return nil, err
	}
	vt, vb, vdt, err := x.read(p + "attn_v_b.weight")
	if err != nil {
		return nil, err
	}
	a := x.c.mla()
	H, r, dn, dv := x.c.Heads, a.KVLoraRank, a.NopeDim, a.VHeadDim
	es := int(dt.Size())
	if vdt != dt || len(kb) != H*r*dn*es || len(vb) != H*dv*r*es {
		return nil, fmt.Errorf("attn_k_b %v %s and attn_v_b %v %s do not hold %d heads of rank %d, nope %d, v %d", kt.Dims, dt, vt.Dims, vdt, H, r, dn, dv)
	}
	out := make([]byte, 0, len(kb)+len(vb))
	for h := 0; h < H; h++ {
		for j := 0; j < dn; j++ { // W_UK row j = column j of W_UKᵀ
			for i := 0; i < r; i++ {
				o := ((h*r+i)*dn + j) * es
				out = append(out, kb[o:o+es]...)
			}
		}
		out = append(out, vb[h*dv*r*es:(h+1)*dv*r*es]...)
	}
	return []safetensors.Tensor{{Name: moeHFName(p + "attn_kv_b.weight"), DType: dt,
		Shape: []uint64{uint64(H * (dn + dv)), uint64(r)}, Data: out}}, nil
}

// ossHFNames are gpt-oss's names where they differ from the Llama family's
// (hfName); the expert stacks are named without their _blocks/_scales
// suffix, gate and up both by the fused gate_up_proj. hfSource.ossTensor
// reads the same names.
var ossHFNames = map[string]string{
	"post_attention_norm.weight": "post_attention_layernorm.weight", "attn_sinks.weight": "self_attn.sinks",
	"attn_output.bias": "self_attn.o_proj.bias", "ffn_gate_inp.weight": "mlp.router.weight", "ffn_gate_inp.bias": "mlp.router.bias",
	"ffn_up_exps.weight": "mlp.experts.gate_up_proj", "ffn_down_exps.weight": "mlp.experts.down_proj",
	"ffn_up_exps.bias": "mlp.experts.gate_up_proj_bias", "ffn_down_exps.bias": "mlp.experts.down_proj_bias",
}

// ossHFName is the gpt-oss checkpoint name of a canonical tensor.
func ossHFName(canon string) string {
	if layer, part := layerPart(canon); layer != "" {
		if n, ok := ossHFNames[part]; ok {
			return "model.layers." + layer + "." + n
		}
	}
	return hfName(canon)
}

// ossTensor is tensor for gpt-oss: the experts' gate and up (weights and
// biases) interleaved row by row into gate_up_proj, MXFP4 stacks split
// into *_blocks [E, rows, groups, 16] and *_scales [E, rows, groups].
func (x *hfExporter) ossTensor(ti gguf.TensorInfo, layer, part string) ([]safetensors.Tensor, error) {
	name := ossHFName(ti.Name)
	p := "blk." + layer + "."
	switch part {
	case "ffn_gate_exps.weight", "ffn_gate_exps.bias":
		return nil, nil // with its up half
	case "ffn_up_exps.weight", "ffn_down_exps.weight":
		gt, raw, err := x.f.Tensor(ti.Name)
		if err != nil {
			return nil, err
		}
		if gt.Type != gguf.TypeMXFP4 || len(gt.Dims) != 3 || gt.Dims[0]%32 != 0 {
			return nil, fmt.Errorf("type %s dims %v: gpt-oss's Hugging Face checkpoints hold the experts as MXFP4 {in, out, experts} (write them as MXFP4, not dense)", gt.Type, gt.Dims)
		}
		E, R, G := gt.Dims[2], gt.Dims[1], gt.Dims[0]/32
		if part == "ffn_up_exps.weight" {
			_, g, err := x.f.Tensor(p + "ffn_gate_exps.weight")
			if err != nil {
				return nil, err
			}
			if len(g) != len(raw) {
				return nil, fmt.Errorf("gate and up stacks differ in size (%d and %d bytes)", len(g), len(raw))
			}
			raw, R = interleaveRows(g, raw, int(E*R), int(G)*17), 2*R
		}
		blocks, scales := hfMXFP4(raw)
		return []safetensors.Tensor{
			{Name: name + "_blocks", DType: safetensors.U8, Shape: []uint64{E, R, G, 16}, Data: blocks},
			{Name: name + "_scales", DType: safetensors.U8, Shape: []uint64{E, R, G}, Data: scales}}, nil
	case "ffn_up_exps.bias":
		ut, u, dt, err := x.read(ti.Name)
		if err != nil {
			return nil, err
		}
		_, g, gdt, err := x.read(p + "ffn_gate_exps.bias")
		if err != nil {
			return nil, err
		}
		if dt != gdt || len(g) != len(u) || len(ut.Dims) != 2 {
			return nil, fmt.Errorf("gate and up biases differ (%s and %s, %d and %d bytes)", gdt, dt, len(g), len(u))
		}
		n, E := ut.Dims[0], ut.Dims[1]
		es := int(dt.Size())
		return []safetensors.Tensor{{Name: name, DType: dt, Shape: []uint64{E, 2 * n},
			Data: interleaveRows(g, u, int(n*E), es)}}, nil
	}
	_, raw, dt, err := x.read(ti.Name)
	if err != nil {
		return nil, err
	}
	return []safetensors.Tensor{{Name: name, DType: dt, Shape: hfShape(ti.Dims), Data: raw}}, nil
}

// interleaveRows merges rows of two equal stacks as g0, u0, g1, u1, ….
func interleaveRows(g, u []byte, rows, rowBytes int) []byte {
	out := make([]byte, 0, len(g)+len(u))
	for r := 0; r < rows; r++ {
		o := r * rowBytes
		out = append(out, g[o:o+rowBytes]...)
		out = append(out, u[o:o+rowBytes]...)
	}
	return out
}

// hfMXFP4 splits GGML MXFP4 blocks (scale, then qs[j] = elem j | elem
// j+16 << 4) into HF's nibble pairs (byte j = elem 2j | elem 2j+1 << 4)
// and scales (kcpu.DequantizeMXFP4HF reads them back).
func hfMXFP4(raw []byte) (blocks, scales []byte) {
	n := len(raw) / 17
	blocks, scales = make([]byte, 16*n), make([]byte, n)
	for b := 0; b < n; b++ {
		blk := raw[17*b : 17*b+17]
		scales[b] = blk[0]
		nib := func(k int) byte {
			if k < 16 {
				return blk[1+k] & 15
			}
			return blk[1+k-16] >> 4
		}
		for j := 0; j < 16; j++ {
			blocks[16*b+j] = nib(2*j) | nib(2*j+1)<<4
		}
	}
	return blocks, scales
}

// hybridTensor is tensor for Nemotron-H and Granite-4.0-H.
func (x *hfExporter) hybridTensor(ti gguf.TensorInfo, layer, part string) ([]safetensors.Tensor, error) {
	c, p := x.c, "blk."+layer+"."
	name := hybridHFName(c.Arch, ti.Name) // Granite's experts: block_sparse_moe.*
	// Granite fuses gate and up (shared or per expert) into one input_linear:
	// the gate half first.
	if c.Arch == "granitehybrid" {
		switch part {
		case "ffn_gate.weight", "ffn_gate_shexp.weight", "ffn_gate_exps.weight":
			return nil, nil
		case "ffn_up.weight", "ffn_up_shexp.weight", "ffn_up_exps.weight":
			ut, u, dt, err := x.read(ti.Name)
			if err != nil {
				return nil, err
			}
			gt, g, gdt, err := x.read(p + strings.Replace(part, "up", "gate", 1))
			if err != nil {
				return nil, err
			}
			if gdt != dt || len(g) != len(u) || len(gt.Dims) != len(ut.Dims) {
				return nil, fmt.Errorf("gate %v %s and up %v %s differ", gt.Dims, gdt, ut.Dims, dt)
			}
			if part != "ffn_up_exps.weight" {
				return []safetensors.Tensor{{Name: hybridHFName(c.Arch, p+"ffn_gate_up.weight"), DType: dt,
					Shape: []uint64{2 * ut.Dims[1], ut.Dims[0]}, Data: append(append([]byte(nil), g...), u...)}}, nil
			}
			E := int(ut.Dims[2])
			n := len(u) / E
			out := make([]byte, 0, 2*len(u))
			for e := 0; e < E; e++ {
				out = append(append(out, g[e*n:(e+1)*n]...), u[e*n:(e+1)*n]...)
			}
			return []safetensors.Tensor{{Name: name, DType: dt, Shape: []uint64{ut.Dims[2], 2 * ut.Dims[1], ut.Dims[0]}, Data: out}}, nil
		}
	}
	_, raw, dt, err := x.read(ti.Name)
	if err != nil {
		return nil, err
	}
	shape := hfShape(ti.Dims)
	switch part {
	case "ssm_a":
		if dt != safetensors.F32 {
			return nil, fmt.Errorf("ssm_a stored as %s (want F32)", dt)
		}
		v := floatsOf(raw)
		for i, a := range v {
			if !(a < 0) {
				return nil, fmt.Errorf("ssm_a[%d] = %v: A = −exp(A_log) must be negative", i, a)
			}
			v[i] = float32(math.Log(-float64(a)))
		}
		raw, shape = floatBytes(v), []uint64{uint64(len(v))}
	case "ssm_d", "ssm_norm.weight":
		shape = []uint64{uint64(len(raw)) / dt.Size()}
	case "ssm_conv1d.weight":
		shape = []uint64{ti.Dims[1], 1, ti.Dims[0]}
	}
	return []safetensors.Tensor{{Name: name, DType: dt, Shape: shape, Data: raw}}, nil
}
