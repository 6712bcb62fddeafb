package plugin

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/plugin/wasmtest"
)

func loadSampler(t *testing.T, rt *Runtime, hostile bool, name string) (*Sampler, error) {
	t.Helper()
	get := wasmtest.Builtin
	if hostile {
		get = wasmtest.HostileC
	}
	b, err := get(name)
	if err != nil {
		t.Fatal(err)
	}
	return rt.LoadSampler(context.Background(), name, b)
}

// fill writes a row of n candidates with descending logits.
func fill(io *SamplerIO, k, b, n int, ids, nCand []int32) {
	for j := range k {
		ids[b*k+j] = int32(10*j + 3)
		io.IDs[b*k+j] = ids[b*k+j]
		io.Logits[b*k+j] = float32(-j)
	}
	fillLogprobs(io.Logits[b*k:b*k+k], io.Logprobs[b*k:b*k+k])
	nCand[b] = int32(n)
	io.NCand[b] = int32(n)
}

func TestLoadBuiltinSamplers(t *testing.T) {
	for _, name := range []string{"standard", "greedy", "typical", "mirostat", "dry", "xtc", "top-n-sigma"} {
		t.Run(name, func(t *testing.T) {
			s, err := loadSampler(t, samplerRT, false, name)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			if d := s.Descriptor(); d.Name != name || d.Candidates != s.K() || len(s.SHA256()) != 64 {
				t.Fatalf("descriptor %+v", d)
			}
			if st := s.Stats(); st.Calls < 1 || st.Failures != 0 {
				t.Fatalf("self-test stats %+v", st)
			}
		})
	}
}

func TestSamplerRefusals(t *testing.T) {
	tests := []struct{ name, stage, want string }{
		{"badabi", "describe", "abi 2"},
		{"badparam", "describe", "outside"},
		{"importer", "imports", "env.peek"},
		{"noexport", "handshake", "kvhost_sample"},
		{"liar", "self-test", "not one of its"},
		{"rewrite", "self-test", "not one of its"},
		{"trap", "self-test", "trapped"},
		{"alwaysloop", "self-test", "ran out of its fuel budget"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadSampler(t, samplerRT, true, tc.name)
			var re *RefusedError
			if !errors.As(err, &re) || re.Stage != tc.stage || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want a *RefusedError at %s containing %q", err, tc.stage, tc.want)
			}
		})
	}
	if _, err := samplerRT.LoadSampler(context.Background(), "junk", []byte("not wasm")); err == nil || !strings.Contains(err.Error(), "refused at instrument") {
		t.Fatalf("junk: %v", err)
	}
	// A configurator is not a sampler, and the reverse: told apart by
	// the exports, before anything is compiled.
	var ke *KindError
	if _, err := samplerRT.LoadSampler(context.Background(), "mha", readWasm(t, "mha")); !errors.As(err, &ke) || ke.Found != KindConfigurator {
		t.Fatalf("configurator as a sampler: %v", err)
	}
	std, _ := wasmtest.Builtin("standard")
	if _, err := samplerRT.Load(context.Background(), "standard", std); !errors.As(err, &ke) || ke.Found != KindSampler {
		t.Fatalf("sampler as a configurator: %v", err)
	}
}

// TestLoopingSamplerStopped: a sampler that loops forever on request is
// stopped by its fuel budget, the failure is typed, the module keeps
// serving from a fresh instance, and a concurrent goroutine keeps running.
func TestLoopingSamplerStopped(t *testing.T) {
	ctx := context.Background()
	s, err := loadSampler(t, samplerRT, true, "loop")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	k := s.K()
	ids, nCand := make([]int32, 16*k), make([]int32, 16)
	step := func(spin float32) error {
		si, err := s.Acquire(ctx)
		if err != nil {
			return err
		}
		defer s.Release(si)
		for b := range 4 {
			fill(&si.IO, k, b, k, ids, nCand)
			si.IO.Params[b] = spin
		}
		return si.Sample(ctx, 4, ids, nCand)
	}
	ticks := make(chan int, 1)
	stop := make(chan struct{})
	go func() { // a bystander that must keep making progress
		n := 0
		for {
			select {
			case <-stop:
				ticks <- n
				return
			default:
				n++
				time.Sleep(time.Millisecond)
			}
		}
	}()
	start := time.Now()
	err = step(1)
	elapsed := time.Since(start)
	close(stop)
	if !errors.Is(err, ErrOutOfFuel) {
		t.Fatalf("looping step: %v, want ErrOutOfFuel", err)
	}
	if elapsed > 2*time.Second {
		t.Fatalf("looping step took %v", elapsed)
	}
	<-ticks
	before := s.Stats().Failures
	if err := step(0); err != nil {
		t.Fatalf("the module stopped serving after a runaway step: %v", err)
	}
	if st := s.Stats(); st.Failures != before {
		t.Fatalf("stats %+v", st)
	}
}

func TestSamplerStepChecksAnswers(t *testing.T) {
	ctx := context.Background()
	s, err := loadSampler(t, samplerRT, false, "greedy")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	si, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids, nCand := make([]int32, 16), make([]int32, 16)
	for b := range 16 {
		fill(&si.IO, 1, b, 1, ids, nCand)
		ids[b] = int32(b)
		si.IO.IDs[b] = int32(b)
	}
	if err := si.Sample(ctx, 16, ids, nCand); err != nil {
		t.Fatal(err)
	}
	for b := range 16 {
		if si.IO.OutID[b] != int32(b) {
			t.Fatalf("row %d: %d", b, si.IO.OutID[b])
		}
	}
	// A host copy that disagrees with what the guest saw is a contract error.
	ids[3] = 99
	err = si.Sample(ctx, 16, ids, nCand)
	var ce *ContractError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "row 3: token 3 is not one of its 1 candidates") {
		t.Fatalf("err %v", err)
	}
	s.Release(si)
	if err := si.Sample(ctx, 17, ids, nCand); err == nil {
		t.Fatal("batch over MaxBatch accepted")
	}
}

// TestGoGuestSampler builds a sampler with the Go guest library
// (sdk/sampler/guest) and runs it: WASI imports are allowed, the Go runtime
// survives fuel instrumentation, and the I/O region works.
func TestGoGuestSampler(t *testing.T) {
	root, err := wasmtest.Root()
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
	s, err := samplerRT.LoadSampler(ctx, "firstgo", wasm)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	si, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(si)
	k := s.K()
	ids, nCand := make([]int32, 16*k), make([]int32, 16)
	for b := range 3 {
		fill(&si.IO, k, b, k, ids, nCand)
		si.IO.Params[b] = float32(b * 2)
		si.IO.State[b] = 10
	}
	if err := si.Sample(ctx, 3, ids, nCand); err != nil {
		t.Fatal(err)
	}
	for b := range 3 {
		if want := ids[b*k+2*b]; si.IO.OutID[b] != want || si.IO.State[b] != 11 {
			t.Fatalf("row %d: token %d state %v, want %d and 11", b, si.IO.OutID[b], si.IO.State[b], want)
		}
	}
}

// TestImportRuleSampler: a sampler may import only functions of
// wasi_snapshot_preview1 the host provides, with its signatures, and no
// memory. (The C importer plugin, env.peek, is in TestSamplerRefusals.)
func TestImportRuleSampler(t *testing.T) {
	i32 := byte(0x7f)
	tests := []struct {
		name string
		imp  wasmImport
		want string
	}{
		{"other module", wasmImport{module: "kvhost", name: "log", params: []byte{i32, i32, i32}}, "imports kvhost.log: a sampler may import only wasi_snapshot_preview1 functions"},
		{"unknown wasi", wasmImport{module: "wasi_snapshot_preview1", name: "no_such_call"}, "wasi_snapshot_preview1.no_such_call: this host does not provide it"},
		{"wrong signature", wasmImport{module: "wasi_snapshot_preview1", name: "fd_write", params: []byte{i32}, results: []byte{i32}},
			"imports wasi_snapshot_preview1.fd_write: signature (i32)->(i32), the host's is (i32,i32,i32,i32)->(i32)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := samplerRT.LoadSampler(context.Background(), "imp", samplerWith(tc.imp))
			var ie *ImportError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want an *ImportError containing %q", err, tc.want)
			}
		})
	}
}

// samplerWith is a module with one import and a (trivial) kvhost_sample
// export, so it is a sampler and only the import rule can refuse it.
func samplerWith(imp wasmImport) []byte {
	m := &wasmtest.Module{}
	m.ImportFunc(imp.module, imp.name, imp.params, imp.results)
	f := m.Func([]byte{wasmtest.I32, wasmtest.I32}, []byte{wasmtest.I32}, nil, wasmtest.I32Const(0))
	m.Export("kvhost_sample", 0, f)
	return m.Bytes()
}
