package model

import (
	"encoding/binary"
	"math"
	"strings"

	"github.com/kvhost/kvhost/host/device"
)

// gemmaHFName is hfName for Gemma checkpoints, whose post_attention_layernorm
// follows attention (GGUF post_attention_norm) rather than feeding the MLP
// as in Llama (docs/architectures/gemma2.md, "name clash").
func gemmaHFName(canon string) string {
	rest, ok := strings.CutPrefix(canon, "blk.")
	if !ok {
		return hfName(canon)
	}
	layer, part, _ := strings.Cut(rest, ".")
	switch part {
	case "post_attention_norm.weight":
		return "model.layers." + layer + ".post_attention_layernorm.weight"
	case "ffn_norm.weight":
		return "model.layers." + layer + ".pre_feedforward_layernorm.weight"
	case "post_ffw_norm.weight":
		return "model.layers." + layer + ".post_feedforward_layernorm.weight"
	}
	return hfName(canon)
}

// plusOne turns an HF Gemma norm weight w into the 1 + w the forward
// multiplies by (the GGUF converter bakes the same in), as F32.
func plusOne(raw []byte, typ device.DType) ([]byte, device.DType) {
	vals, err := toF32(raw, typ)
	if err != nil {
		return raw, typ // a quantized norm: the uploader refuses it by type
	}
	out := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(1+v))
	}
	return out, device.F32
}
