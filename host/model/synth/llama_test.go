package synth

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/model/gguf"
)

// llamaTools finds ../shared/tools/llama.cpp beside the repository root.
func llamaTools(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("skipping: no go.mod above the test directory")
		}
		dir = parent
	}
	tools := filepath.Join(dir, "..", "shared", "tools", "llama.cpp")
	if _, err := os.Stat(filepath.Join(tools, "run")); err != nil {
		t.Skipf("skipping: %s is absent; this cross-check needs llama.cpp's llama-quantize", tools)
	}
	return tools
}

// TestMatchesLlamaQuantize quantizes one f32 model with llama-quantize and
// writes the same weights with gen-model's quantized file types: every
// tensor must get the same type and every block the same bytes (the
// reference quantizers are the same float32 arithmetic; all 12 types matched
// bit for bit against the shared build when this was written).
func TestMatchesLlamaQuantize(t *testing.T) {
	tools := llamaTools(t)
	if testing.Short() {
		t.Skip("skipping in -short mode: runs llama-quantize nine times")
	}
	dir := t.TempDir()
	f32 := filepath.Join(dir, "f32.gguf")
	spec := wide("f32")
	var buf bytes.Buffer
	if err := Write(&buf, spec, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f32, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dtype := range []string{"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k_m", "q4_k_m", "q5_k_m", "q6_k", "iq4_nl", "iq4_xs"} {
		t.Run(dtype, func(t *testing.T) {
			out := filepath.Join(dir, dtype+".gguf")
			cmd := exec.Command(filepath.Join(tools, "run"), "llama-quantize", f32, out, strings.ToUpper(dtype))
			if msg, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("llama-quantize: %v\n%s", err, msg)
			}
			theirs, err := gguf.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer theirs.Close()
			s := spec
			s.DType = dtype
			var mine bytes.Buffer
			if err := Write(&mine, s, nil); err != nil {
				t.Fatal(err)
			}
			ours, err := gguf.Parse("gen-model", mine.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			var blocks, same int
			for _, ti := range ours.Tensors {
				tt, b, err := theirs.Tensor(ti.Name)
				if err != nil {
					t.Fatalf("%s: %v", ti.Name, err)
				}
				if tt.Type != ti.Type {
					t.Errorf("%s: gen-model writes %v, llama-quantize %v", ti.Name, ti.Type, tt.Type)
					continue
				}
				_, a, _ := ours.Tensor(ti.Name)
				bs := int(ti.Type.TypeSize())
				for o := 0; o+bs <= len(a); o += bs {
					blocks++
					if bytes.Equal(a[o:o+bs], b[o:o+bs]) {
						same++
					}
				}
			}
			t.Logf("%s: %d of %d blocks identical", dtype, same, blocks)
			if same != blocks {
				t.Errorf("only %d of %d blocks equal llama-quantize's", same, blocks)
			}
		})
	}
}
