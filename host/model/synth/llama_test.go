package synth

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/internal/testmodels"
)

// llamaTools is ../shared/tools/llama.cpp, or skips.
func llamaTools(t *testing.T) string {
	t.Helper()
	dir, ok := testmodels.LlamaCpp()
	if !ok {
		t.Skip("skipping: ../shared/tools/llama.cpp is absent; this cross-check needs llama.cpp's llama-quantize")
	}
	return dir
}

// TestMatchesLlamaQuantize quantizes one f32 model with llama-quantize in
// every file type gen-model writes and checks that gen-model would write
// the same file: every tensor gets the type gen-model's mixture picks, and
// the blocks kernels/cpu's quantizers make from the same f32 values are
// llama-quantize's bytes (64 blocks spread over each tensor; the quantizers
// are the same float32 arithmetic, and every block checked matched when
// this was written). TestStreamMatchesInMemory holds gen-model's output to
// that mixture and those quantizers.
func TestMatchesLlamaQuantize(t *testing.T) {
	tools := llamaTools(t)
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
	src, err := gguf.Parse("f32", buf.Bytes())
	if err != nil {
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
			want := types(t, s)
			var blocks, same int
			for _, ti := range theirs.Tensors {
				if len(ti.Dims) != 2 {
					continue
				}
				if ti.Type != want[ti.Name] {
					t.Errorf("%s: gen-model picks %v, llama-quantize %v", ti.Name, want[ti.Name], ti.Type)
					continue
				}
				_, b, _ := theirs.Tensor(ti.Name)
				_, raw, _ := src.Tensor(ti.Name)
				bs, ts := int(ti.Type.BlockSize()), int(ti.Type.TypeSize())
				n := len(b) / ts
				for k := 0; k < n; k += max(1, n/64) {
					vals := make([]float32, bs)
					for j := range vals {
						vals[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*(k*bs+j):]))
					}
					mine := make([]byte, ts)
					if err := gguf.Quantize(ti.Type, mine, vals); err != nil {
						t.Fatal(err)
					}
					blocks++
					if bytes.Equal(mine, b[k*ts:(k+1)*ts]) {
						same++
					}
				}
			}
			t.Logf("%s: %d of %d blocks identical", dtype, same, blocks)
			if same != blocks || blocks == 0 {
				t.Errorf("%d of %d blocks equal llama-quantize's", same, blocks)
			}
		})
	}
}
