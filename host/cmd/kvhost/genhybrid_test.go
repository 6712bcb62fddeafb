package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenModelHybrid: gen-model writes both hybrid architectures (and
// Granite's MoE variant), plan reads them through the mamba configurator
// (a state pool beside the KV pool), and bad flag combinations are refused
// naming the flag.
func TestGenModelHybrid(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--arch", "nemotron_h"}, {"--arch", "granitehybrid"}, {"--arch", "granitehybrid", "--experts", "4", "--dtype", "bf16"},
	} {
		out := filepath.Join(dir, strings.Join(args, "")+".gguf")
		var so, se bytes.Buffer
		if err := run(context.Background(), append([]string{"gen-model", "--size", "tiny", "--out", out}, args...), &so, &se); err != nil {
			t.Fatalf("gen-model %v: %v\n%s", args, err, se.String())
		}
		so.Reset()
		if err := run(context.Background(), []string{"plan", "--model", out, "--device-memory", "256MiB"}, &so, &se); err != nil {
			t.Fatalf("plan %v: %v\n%s", args, err, se.String())
		}
		if !strings.Contains(so.String(), "pool state") || !strings.Contains(so.String(), "B/request") {
			t.Fatalf("plan %v lacks the state pool:\n%s", args, so.String())
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--arch", "llama", "--experts", "4"}, "--experts is for --arch granitehybrid"},
		{[]string{"--arch", "nemotron_h", "--dtype", "q8_0"}, `written as f32, f16 or bf16, not "q8_0"`},
		{[]string{"--arch", "granitehybrid", "--experts", "1"}, "--experts 1: granitehybrid only, in [2, 256]"},
		{[]string{"--arch", "mamba"}, `architecture "mamba" is not supported (llama, mistral, gemma2, gemma3, gpt-oss, qwen3moe, deepseek2, deepseek3, nemotron_h, granitehybrid)`},
	} {
		err := run(context.Background(), append([]string{"gen-model", "--size", "tiny", "--out", filepath.Join(dir, "x.gguf")}, tc.args...), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
