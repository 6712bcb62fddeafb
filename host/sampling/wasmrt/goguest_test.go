package wasmrt

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kvhost/kvhost/host/sampling/internal/testwasm"
)

// TestGoGuest builds a sampler with the Go guest library (sdk/sampler/guest)
// and runs it: WASI imports are allowed, the Go runtime survives fuel
// instrumentation, and the I/O region works.
func TestGoGuest(t *testing.T) {
	root, err := testwasm.Root()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "firstgo.wasm")
	cmd := exec.Command("go", "build", "-trimpath", "-buildmode=c-shared", "-o", out, "./host/sampling/testdata/go/firstgo")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, err := testRT.Load(ctx, "firstgo", wasm)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	inst, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(inst)
	k := m.K()
	ids, nCand := make([]int32, 16*k), make([]int32, 16)
	for b := range 3 {
		fill(&inst.IO, k, b, k, ids, nCand)
		inst.IO.Params[b] = float32(b * 2)
		inst.IO.State[b] = 10
	}
	if err := inst.Sample(ctx, 3, ids, nCand); err != nil {
		t.Fatal(err)
	}
	for b := range 3 {
		if want := ids[b*k+2*b]; inst.IO.OutID[b] != want || inst.IO.State[b] != 11 {
			t.Fatalf("row %d: token %d state %v, want %d and 11", b, inst.IO.OutID[b], inst.IO.State[b], want)
		}
	}
}
