package model

import (
	"testing"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/model/gguf"
)

// TestOSSExpertsStayMXFP4: gpt-oss's experts load as MXFP4 weights from the
// GGUF file (served in place: the device's weight bytes are the file's
// tensor bytes) and from the Hugging Face *_blocks/*_scales copy ExportHF
// writes (repacked, the same bytes: 16 code bytes and one scale per 32
// values); nothing is expanded to bf16.
func TestOSSExpertsStayMXFP4(t *testing.T) {
	path := writeBPE(t, "gpt-oss", "tiny")
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var fileBytes, expertBytes int64
	for _, ti := range f.Tensors {
		if ti.Name == "rope_freqs.weight" {
			continue
		}
		fileBytes += int64(ti.Size)
		if ti.Type == gguf.TypeMXFP4 {
			expertBytes += int64(ti.Size)
		}
	}
	f.Close()
	if expertBytes == 0 {
		t.Fatal("the generated gpt-oss file has no MXFP4 tensors")
	}
	g := loadSWA(t, path, "GptOssForCausalLM", 8)
	c := g.m.Config
	h := loadSWA(t, exportHF(t, path), "GptOssForCausalLM", 8)
	for name, r := range map[string]*rig{"gguf": g, "hf": h} {
		var seen int64
		for l, layer := range r.m.layers {
			moe, ok := layer.FFN.(*moePart)
			if !ok {
				t.Fatalf("%s: layer %d's FFN is %T", name, l, layer.FFN)
			}
			m := SWAOf(c).MoE
			for _, w := range []device.Weight{moe.gate, moe.up, moe.down} {
				if want := int64(w.Rows) * int64(w.Cols) / 32 * 17; w.Type != device.MXFP4 || w.Bytes != want || w.Rows%m.Experts != 0 {
					t.Fatalf("%s: layer %d expert weight %s %dx%d of %d bytes, want mxfp4 of %d", name, l, w.Type, w.Rows, w.Cols, w.Bytes, want)
				}
				seen += w.Bytes
			}
		}
		if seen != expertBytes {
			t.Errorf("%s: %d expert bytes resident, the file holds %d", name, seen, expertBytes)
		}
	}
	// The file's tensors plus the 4-byte ones column the expert biases are
	// added through (Builder.ones).
	if g.m.WeightBytes() != fileBytes+4 {
		t.Errorf("gguf: %d weight bytes resident, the file's tensors are %d (+4)", g.m.WeightBytes(), fileBytes)
	}
	if g.m.MappedBytes < expertBytes {
		t.Errorf("gguf: %d bytes served in place, fewer than the %d expert bytes", g.m.MappedBytes, expertBytes)
	}
	if h.m.WeightBytes() != g.m.WeightBytes() {
		t.Errorf("hf: %d weight bytes resident, gguf %d", h.m.WeightBytes(), g.m.WeightBytes())
	}
	// What plan predicts for the Hugging Face copy (an f32 checkpoint whose
	// config says quant_method mxfp4): HFQuantizedBytes for the experts,
	// 4 bytes an element for the rest, is what loading it kept.
	var planned int64
	for _, ts := range h.m.Tensors() {
		n, ok := HFQuantizedBytes(c, "mxfp4", ts)
		switch {
		case ts.Vector:
			n = 4 * int64(ts.Cols)
		case !ok:
			n = 4 * int64(ts.Rows) * int64(ts.Cols)
		}
		planned += n
	}
	if planned != h.m.WeightBytes() {
		t.Errorf("hf: plan's sizes add up to %d bytes, loading kept %d", planned, h.m.WeightBytes())
	}
	if _, ok := HFQuantizedBytes(c, "", TensorShape{Name: "blk.0.ffn_up_exps.weight", Rows: 64, Cols: 64}); ok {
		t.Error("a dequantized checkpoint's experts (no quant_method) sized as MXFP4")
	}
}
