package model

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/safetensors"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/host/model/tokenizer"
)

// exportHF writes the GGUF model at path as a Hugging Face directory with
// ExportHF (what gen-model --format hf does) and returns the directory.
func exportHF(t testing.TB, path string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "hf")
	if err := ExportHF(path, dir, HFExport{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeBPE is writeSWA with the byte-level BPE tokenizer ExportHF
// exports (the weights are the same: the tokenizer draws nothing).
func writeBPE(t *testing.T, arch, size string) string {
	t.Helper()
	spec, err := synth.ArchPreset(arch, size, "f32")
	if err != nil {
		t.Fatal(err)
	}
	spec.Tokenizer = "bpe"
	return writeSpec(t, spec)
}

// writeArchBPE is writeArch's tiny model with the BPE tokenizer.
func writeArchBPE(t *testing.T, arch string) string { return writeBPE(t, arch, "tiny") }

// writeHybridBPE is writeHybrid with the BPE tokenizer.
func writeHybridBPE(t testing.TB, arch, size string) string {
	t.Helper()
	return writeHybridTok(t, arch, size, "bpe")
}

// TestExportHFTokenizer: the exported tokenizer.json and
// tokenizer_config.json tokenize as the GGUF vocabulary does (with and
// without special-token parsing), end generation on the same tokens, and
// carry the same chat template and BOS/EOS.
func TestExportHFTokenizer(t *testing.T) {
	path := writeBPE(t, "llama", "tiny")
	g, h := load(t, path, 4), load(t, exportHF(t, path), 4)
	gt, ht := g.m.Tokenizer, h.m.Tokenizer
	if g.m.ChatTemplate == "" || g.m.ChatTemplate != h.m.ChatTemplate {
		t.Fatalf("chat templates differ:\ngguf %q\nhf   %q", g.m.ChatTemplate, h.m.ChatTemplate)
	}
	if gt.BOS() != ht.BOS() || gt.EOS() != ht.EOS() || g.m.BOSText != h.m.BOSText || g.m.EOSText != h.m.EOSText || gt.VocabSize() != ht.VocabSize() {
		t.Fatalf("specials: gguf bos %d eos %d %q %q vocab %d, hf bos %d eos %d %q %q vocab %d", gt.BOS(), gt.EOS(), g.m.BOSText, g.m.EOSText,
			gt.VocabSize(), ht.BOS(), ht.EOS(), h.m.BOSText, h.m.EOSText, ht.VocabSize())
	}
	for id := int32(0); id < int32(gt.VocabSize()); id++ {
		if gt.EOG(id) != ht.EOG(id) {
			t.Fatalf("token %d ends generation in one copy only (gguf %v)", id, gt.EOG(id))
		}
	}
	type specialEncoder interface {
		EncodeWithOptions(string, tokenizer.EncodeOptions) ([]int32, error)
	}
	for _, text := range []string{"Once upon a time, a little cat sat on the mat.", "  spaces\tand\nnewlines 12345 ",
		"Ünïcödé — 日本語 🙂", `{"json": [1, 2.5, null]}`, "<|im_start|>user\nhi<|im_end|>\n"} {
		for _, special := range []bool{false, true} {
			o := tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: special}
			a, err := gt.(specialEncoder).EncodeWithOptions(text, o)
			if err != nil {
				t.Fatal(err)
			}
			b, err := ht.(specialEncoder).EncodeWithOptions(text, o)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("%q (special %v): gguf %v, hf %v", text, special, a, b)
			}
		}
	}
}

// TestExportHFGraniteMoE: Granite-4.0-H's experts are written in
// GraniteMoeHybridMoE's layout — block_sparse_moe.input_linear [E, 2·ff,
// hidden] with each expert's gate rows then its up rows, output_linear
// [E, hidden, ff], router.layer [E, hidden] — and the shared MLP's gate
// and up fused into shared_mlp.input_linear; loaded back, the logits equal
// the GGUF file's.
func TestExportHFGraniteMoE(t *testing.T) {
	s, err := synth.HybridPreset("granitehybrid", "tiny", "f32")
	if err != nil {
		t.Fatal(err)
	}
	s.Experts, s.ExpertsUsed, s.ExpertFF, s.Tokenizer = 4, 2, s.FF/2, "bpe"
	path := filepath.Join(t.TempDir(), "granite-moe.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.WriteHybrid(f, s); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dir := exportHF(t, path)
	g, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	st, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	E, ff, sff, h := 4, s.ExpertFF, s.FF, s.Hidden
	get := func(name string, shape ...uint64) []byte {
		ti, raw, err := st.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ti.Shape) != fmt.Sprint(shape) {
			t.Fatalf("%s has shape %v, want %v", name, ti.Shape, shape)
		}
		return raw
	}
	src := func(name string) []byte {
		_, raw, err := g.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	in := get("model.layers.0.block_sparse_moe.input_linear.weight", uint64(E), uint64(2*ff), uint64(h))
	gate, up := src("blk.0.ffn_gate_exps.weight"), src("blk.0.ffn_up_exps.weight")
	n := ff * h * 4
	for e := 0; e < E; e++ {
		if !bytes.Equal(in[2*e*n:(2*e+1)*n], gate[e*n:(e+1)*n]) || !bytes.Equal(in[(2*e+1)*n:(2*e+2)*n], up[e*n:(e+1)*n]) {
			t.Fatalf("expert %d: input_linear is not [gate; up]", e)
		}
	}
	if !bytes.Equal(get("model.layers.0.block_sparse_moe.output_linear.weight", uint64(E), uint64(h), uint64(ff)), src("blk.0.ffn_down_exps.weight")) {
		t.Fatal("output_linear differs from ffn_down_exps")
	}
	if !bytes.Equal(get("model.layers.0.block_sparse_moe.router.layer.weight", uint64(E), uint64(h)), src("blk.0.ffn_gate_inp.weight")) {
		t.Fatal("router.layer differs from ffn_gate_inp")
	}
	shared := get("model.layers.0.shared_mlp.input_linear.weight", uint64(2*sff), uint64(h))
	if !bytes.Equal(shared, append(append([]byte(nil), src("blk.0.ffn_gate_shexp.weight")...), src("blk.0.ffn_up_shexp.weight")...)) {
		t.Fatal("shared_mlp.input_linear is not [gate; up]")
	}
	get("model.layers.0.shared_mlp.output_linear.weight", uint64(h), uint64(sff))

	gr, hh := hybridRig(t, path), hybridRig(t, dir)
	toks := []int32{1, 40, 300, 7, 99, 512, 3, 64}
	gs, hs := newHybridSeq(t, hybridPools(t, gr, 2, 8, true)), newHybridSeq(t, hybridPools(t, hh, 2, 8, true))
	if d := maxAbsDiff(gs.run(t, gr.m, toks, len(toks)), hs.run(t, hh.m, toks, len(toks))); d > 1e-4 {
		t.Fatalf("HF and GGUF logits differ by %g", d)
	}
}

// TestExportHFRefusals: what a Hugging Face directory cannot hold is
// refused with the reason — a SentencePiece vocabulary (kvhost reads
// byte-level BPE tokenizer.json only), llama.cpp's quantized types, a
// non-empty target — and nothing is left behind.
func TestExportHFRefusals(t *testing.T) {
	spec, err := synth.ArchPreset("llama", "tiny", "q8_0")
	if err != nil {
		t.Fatal(err)
	}
	spec.Tokenizer = "bpe"
	quant := writeSpec(t, spec)
	for _, tc := range []struct {
		path, want string
	}{
		{writeSWA(t, "llama", "tiny"), `tokenizer.ggml.model "llama": only a byte-level BPE vocabulary`},
		{quant, "token_embd.weight is Q8_0: a Hugging Face checkpoint holds F32, F16 or BF16"},
	} {
		dir := filepath.Join(t.TempDir(), "out")
		err := ExportHF(tc.path, dir, HFExport{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want %q", tc.path, err, tc.want)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("a refused export left %s behind (%v)", dir, err)
		}
		if _, err := os.Stat(dir + ".tmp"); !os.IsNotExist(err) {
			t.Fatalf("a refused export left %s.tmp behind (%v)", dir, err)
		}
	}
	if err := ExportHF(writeBPE(t, "llama", "tiny"), t.TempDir()+"/x", HFExport{ShardBytes: -1}); err == nil || !strings.Contains(err.Error(), "shard size -1") {
		t.Fatalf("negative shard size: %v", err)
	}
}

// TestExportHFShards: a shard size below the model's splits the weights
// into model-0000i-of-0000n.safetensors with the index transformers
// writes, and the sharded copy loads to the single file's logits.
func TestExportHFShards(t *testing.T) {
	path := writeBPE(t, "llama", "tiny")
	dir := filepath.Join(t.TempDir(), "sharded")
	if err := ExportHF(path, dir, HFExport{ShardBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	idx, err := safetensors.ReadIndex(filepath.Join(dir, safetensors.IndexFileName))
	if err != nil {
		t.Fatal(err)
	}
	shards := map[string]bool{}
	for _, f := range idx.WeightMap {
		shards[f] = true
	}
	if len(shards) < 3 || !shards[fmt.Sprintf("model-00001-of-%05d.safetensors", len(shards))] {
		t.Fatalf("shards %v", shards)
	}
	g, h := load(t, path, 4), load(t, dir, 4)
	closeLogits(t, "sharded HF vs GGUF", logitsOf(t, h, archPrompt), logitsOf(t, g, archPrompt), 1e-5)
}
