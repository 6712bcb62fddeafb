package model

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/internal/testmodels"
)

// greedyTokens loads path and generates n tokens greedily after prompt.
func greedyTokens(t *testing.T, path, prompt string, n int) (*rig, []int32) {
	t.Helper()
	r := load(t, path, 64)
	toks, err := r.m.Tokenizer.Encode(prompt, true)
	if err != nil {
		t.Fatal(err)
	}
	var pages []int32
	logits := r.run(t, &pages, toks, 0, 1)
	pos := len(toks)
	var gen []int32
	for range n {
		next := int32(argmax32(logits))
		gen = append(gen, next)
		logits = r.run(t, &pages, []int32{next}, pos, 1)
		pos++
	}
	return r, gen
}

// splitModels are a trained f32 model and a quantized synthetic one (a
// mix of K-quant types), each also written as gguf-split shards.
func splitModels(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	spec, err := synth.Preset("tiny", "q4_k_m")
	if err != nil {
		t.Fatal(err)
	}
	q := filepath.Join(dir, "tiny-q4_k_m.gguf")
	f, err := os.Create(q)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	if err := synth.Write(w, spec, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return map[string]string{"stories260K": storiesPath(t), "tiny-q4_k_m": q}
}

// TestSplitModelMatchesMerged: a model written as gguf-split shards (by
// tensor count and by size) loads from any shard's path, is served from the
// shard files in place (the CPU device maps every matrix), accounts the
// same weight bytes as the merged file, and generates exactly the same
// greedy tokens.
func TestSplitModelMatchesMerged(t *testing.T) {
	const prompt, n = "Once upon a time", 24
	for name, merged := range splitModels(t) {
		mr, want := greedyTokens(t, merged, prompt, n)
		for _, lim := range []gguf.SplitLimits{{MaxTensors: 7}, {MaxBytes: 64 << 10}} {
			prefix := filepath.Join(t.TempDir(), name)
			shards, err := gguf.SplitFile(merged, prefix, lim)
			if err != nil {
				t.Fatal(err)
			}
			if len(shards) < 3 {
				t.Fatalf("%s %+v: %d shards; the test wants several", name, lim, len(shards))
			}
			for _, p := range []string{shards[0], shards[len(shards)-1]} {
				sr, got := greedyTokens(t, p, prompt, n)
				if !slices.Equal(got, want) {
					t.Fatalf("%s from %s: greedy tokens differ from the merged file's:\nsplit:  %v\nmerged: %v", name, filepath.Base(p), got, want)
				}
				if sr.m.WeightBytes() != mr.m.WeightBytes() || sr.m.MappedBytes != mr.m.MappedBytes || sr.m.MappedBytes == 0 {
					t.Fatalf("%s: split weights %d B (%d mapped), merged %d B (%d mapped)", name, sr.m.WeightBytes(), sr.m.MappedBytes, mr.m.WeightBytes(), mr.m.MappedBytes)
				}
				if sr.m.Name != mr.m.Name {
					t.Fatalf("%s: split model named %q, merged %q", name, sr.m.Name, mr.m.Name)
				}
			}
		}
	}
}

// TestSplitModelMissingShard: a split model with a shard gone is refused
// with an error naming the shard.
func TestSplitModelMissingShard(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "stories")
	shards, err := gguf.SplitFile(storiesPath(t), prefix, gguf.SplitLimits{MaxTensors: 10})
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(shards[1])
	dev, err := cpu.New(device.Options{MemoryBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	_, err = Load(shards[0], Options{Device: dev, Weights: alloc.NewDirect("weights", dev), Activations: alloc.New("caching", dev)})
	if err == nil || !strings.Contains(err.Error(), "shard 2 of "+strconv.Itoa(len(shards))) || !strings.Contains(err.Error(), filepath.Base(shards[1])) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("Load with shard 2 missing: %v", err)
	}
}

// TestSplitModelMatchesLlamaCpp: llama.cpp's llama-simple loads kvhost's
// shards (from the first shard, as llama.cpp requires) and generates the
// same greedy text as from the merged file and as kvhost does.
func TestSplitModelMatchesLlamaCpp(t *testing.T) {
	tools, ok := testmodels.LlamaCpp()
	if !ok {
		t.Skip("skipping: ../shared/tools/llama.cpp is absent; this cross-check runs llama-simple on split files")
	}
	const prompt, n = "Once upon a time", 32
	run := filepath.Join(tools, "run")
	simple := func(path string) string {
		out, err := exec.Command(run, "llama-simple", "-m", path, "-n", strconv.Itoa(n), prompt).Output()
		if err != nil {
			msg := ""
			if ee, ok := err.(*exec.ExitError); ok {
				msg = string(ee.Stderr)
			}
			t.Fatalf("llama-simple -m %s: %v\n%s", filepath.Base(path), err, msg)
		}
		return strings.TrimSpace(string(out))
	}
	merged := storiesPath(t)
	shards, err := gguf.SplitFile(merged, filepath.Join(t.TempDir(), "stories"), gguf.SplitLimits{MaxTensors: 7})
	if err != nil {
		t.Fatal(err)
	}
	want := simple(merged)
	if got := simple(shards[0]); got != want {
		t.Fatalf("llama.cpp's text from kvhost's %d shards differs from the merged file's:\nsplit:  %q\nmerged: %q", len(shards), got, want)
	}
	r, gen := greedyTokens(t, shards[0], prompt, n)
	text, err := r.m.Tokenizer.Decode(gen)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(want, prompt+text) {
		t.Fatalf("kvhost's greedy text from the shards differs from llama.cpp's:\nkvhost:    %q\nllama.cpp: %q", prompt+text, want)
	}
}
