package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/synth"
)

// genArchs are the architectures gen-model writes: synth's, and the hybrid
// Mamba-2 writers.
func genArchs() []string {
	return append(slices.Clone(synth.Architectures), "nemotron_h", "granitehybrid")
}

func genModel(args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlagSet("gen-model", stderr)
	arch := fs.String("arch", "llama", "architecture: llama | mistral | gemma2 | gemma3 | gpt-oss (sliding window of 16/64/128 tokens on tiny/small/medium) | qwen3moe (GQA + routed experts) | deepseek2 (V2-Lite shape: MLA, softmax group-limited routing, shared experts) | deepseek3 (a deepseek2 file with V3's q_lora and sigmoid routing) | nemotron_h | granitehybrid (hybrid Mamba-2: f32, f16 or bf16)")
	size := fs.String("size", "small", "tiny | small (≈15M params) | medium (≈110M params)")
	var lim gguf.SplitLimits
	fs.Func("split-max-tensors", "write llama.cpp gguf-split shards OUT-00001-of-0000N.gguf of at most N tensors each (default 0: one file)", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is out of range: 0 (one file) or more", s)
		}
		lim.MaxTensors = n
		return nil
	})
	fs.Var((*byteSize)(&lim.MaxBytes), "split-max-size", "write gguf-split shards of at most this much tensor data each, e.g. 2G (0: one file); with --format hf, the safetensors shard size (0: 2 GiB)")
	dtype := fs.String("dtype", "f32", "file type: f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q2_k | q3_k_m | q4_k_s | q4_k_m | q5_k_s | q5_k_m | q6_k | iq4_nl | iq4_xs (quantized types mixed per tensor as llama-quantize mixes them)")
	out := fs.String("out", "", "output GGUF file, or with --format hf the Hugging Face directory (required)")
	format := fs.String("format", "gguf", "gguf | hf (a Hugging Face directory of the same weights: config.json, model.safetensors (sharded by --split-max-size), tokenizer.json, tokenizer_config.json, generation_config.json; f32, f16 or bf16; bpe tokenizer)")
	defer func() {
		// Whichever architecture wrote --out, the split rewrites it.
		if err == nil && *format == "gguf" && lim != (gguf.SplitLimits{}) {
			err = splitGenerated(*out, lim, stdout)
		}
	}()
	tok := fs.String("tokenizer", "", "spm (SentencePiece, Llama-2 chat template; the gguf default) | bpe (byte-level BPE, ChatML template with tools; the hf default and only choice)")
	vocab := fs.Int("vocab", 0, "vocabulary size (0: the preset's; bpe needs at least 512)")
	experts := fs.Int("experts", 0, "granitehybrid: a mixture of N SwiGLU experts (2 per token, half the MLP's width) beside the shared MLP in every layer (0: dense)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("gen-model: --out is required")
	}
	if *experts != 0 && *arch != "granitehybrid" {
		return fmt.Errorf("gen-model: --experts is for --arch granitehybrid")
	}
	target := *out
	switch *format {
	case "gguf":
		if *tok == "" {
			*tok = "spm"
		}
	case "hf":
		if err := hfFlags(*dtype, *tok, lim); err != nil {
			return err
		}
		if ents, err := os.ReadDir(*out); err == nil && len(ents) > 0 {
			return fmt.Errorf("gen-model: --out %s exists and is not empty (--format hf writes a new directory)", *out)
		}
		*tok = "bpe"
		// The GGUF file is written first, beside the directory, and exported.
		target = filepath.Clean(*out) + ".gguf.tmp"
		defer os.Remove(target)
		defer func() {
			if err == nil {
				err = exportHF(target, *out, lim.MaxBytes, stdout)
			}
		}()
	default:
		return fmt.Errorf("gen-model: --format %q: use gguf or hf", *format)
	}
	if *tok != "spm" && *tok != "bpe" {
		return fmt.Errorf("gen-model: --tokenizer %q: use spm or bpe", *tok)
	}
	if *arch == "nemotron_h" || *arch == "granitehybrid" {
		return genHybrid(*arch, *size, *dtype, target, *tok, *vocab, *experts, stdout)
	}
	if !slices.Contains(synth.Architectures, *arch) {
		return fmt.Errorf("gen-model: architecture %q is not supported (%s)", *arch, strings.Join(genArchs(), ", "))
	}
	spec, err := synth.ArchPreset(*arch, *size, *dtype)
	if err != nil {
		return err
	}
	spec.Tokenizer = *tok
	if *vocab != 0 {
		if *vocab < 512 || *vocab > 1<<20 {
			return fmt.Errorf("gen-model: --vocab %d out of range [512, %d]", *vocab, 1<<20)
		}
		spec.Vocab = *vocab
		spec.Name += fmt.Sprintf("-%s%d", *tok, *vocab)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	tmp := target + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	start := time.Now()
	last := start
	fmt.Fprintf(stdout, "generating %s (%d parameters, %s) ...\n", spec.Name, spec.Params(), *dtype)
	w := bufio.NewWriterSize(f, 1<<20)
	err = synth.Write(w, spec, func(done, total int) {
		if now := time.Now(); now.Sub(last) > time.Second || done == total && now.Sub(start) > time.Second {
			last = now
			fmt.Fprintf(stdout, "  %3d%% (%d/%d tensors)\n", 100*done/total, done, total)
		}
	})
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("gen-model: %w", err)
	}
	if err := os.Rename(tmp, target); err != nil {
		return err
	}
	st, _ := os.Stat(target)
	fmt.Fprintf(stdout, "wrote %s (%.1f MiB) in %s\n", target, float64(st.Size())/(1<<20), time.Since(start).Round(time.Millisecond))
	return nil
}

// genHybrid writes a hybrid Mamba-2 model (synth.WriteHybrid).
func genHybrid(arch, size, dtype, out, tok string, vocab, experts int, stdout io.Writer) error {
	spec, err := synth.HybridPreset(arch, size, dtype)
	if err != nil {
		return fmt.Errorf("gen-model: %w", err)
	}
	if experts != 0 {
		if arch != "granitehybrid" || experts < 2 || experts > 256 {
			return fmt.Errorf("gen-model: --experts %d: granitehybrid only, in [2, 256]", experts)
		}
		spec.Experts, spec.ExpertsUsed, spec.ExpertFF = experts, 2, spec.FF/2
		spec.Name += fmt.Sprintf("-moe%d", experts)
	}
	if vocab != 0 {
		if vocab < 512 || vocab > 1<<20 {
			return fmt.Errorf("gen-model: --vocab %d out of range [512, %d]", vocab, 1<<20)
		}
		spec.Vocab = vocab
	}
	spec.Tokenizer = tok
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	start := time.Now()
	fmt.Fprintf(stdout, "generating %s (%d parameters, layers %s) ...\n", spec.Name, spec.Params(), spec.Pattern)
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = synth.WriteHybrid(w, spec)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("gen-model: %w", err)
	}
	st, _ := os.Stat(out)
	fmt.Fprintf(stdout, "wrote %s (%.1f MiB) in %s\n", out, float64(st.Size())/(1<<20), time.Since(start).Round(time.Millisecond))
	return nil
}

// hfFlags refuses the flags --format hf cannot honour, naming them.
func hfFlags(dtype, tok string, lim gguf.SplitLimits) error {
	switch strings.ToLower(dtype) {
	case "f32", "f16", "bf16":
	default:
		return fmt.Errorf("gen-model: --dtype %s with --format hf: a Hugging Face checkpoint is written as f32, f16 or bf16 (quantize a GGUF file instead)", dtype)
	}
	if tok != "" && tok != "bpe" {
		return fmt.Errorf("gen-model: --tokenizer %s with --format hf: the Hugging Face directory's tokenizer.json is byte-level BPE; use bpe (the default)", tok)
	}
	if lim.MaxTensors != 0 {
		return fmt.Errorf("gen-model: --split-max-tensors splits GGUF files; with --format hf, --split-max-size sets the safetensors shard size")
	}
	return nil
}

// exportHF writes the generated GGUF file src as the Hugging Face
// directory dir (model.ExportHF), shards of at most shard bytes (0: the
// default).
func exportHF(src, dir string, shard int64, stdout io.Writer) error {
	start := time.Now()
	if err := model.ExportHF(src, dir, model.HFExport{ShardBytes: shard}); err != nil {
		return fmt.Errorf("gen-model: %w", err)
	}
	var size int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if info, err := e.Info(); err == nil {
			size += info.Size()
		}
	}
	fmt.Fprintf(stdout, "wrote Hugging Face directory %s (%d files, %.1f MiB) in %s\n", dir, len(ents), float64(size)/(1<<20), time.Since(start).Round(time.Millisecond))
	return nil
}
