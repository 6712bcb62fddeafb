package wasmrt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/sampling/internal/testwasm"
)

var testRT *Runtime

func TestMain(m *testing.M) {
	if err := testwasm.Ensure(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var err error
	testRT, err = NewRuntime(context.Background(), Config{MaxBatch: 16, FuelBase: 1 << 16})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = testRT.Close(context.Background())
	os.Exit(code)
}

func load(t *testing.T, rt *Runtime, hostile bool, name string) (*Module, error) {
	t.Helper()
	get := testwasm.Builtin
	if hostile {
		get = testwasm.Hostile
	}
	b, err := get(name)
	if err != nil {
		t.Fatal(err)
	}
	return rt.Load(context.Background(), name, b)
}

// fill writes a row of n candidates with descending logits.
func fill(io *IO, k, b, n int, ids, nCand []int32) {
	for j := range k {
		ids[b*k+j] = int32(10*j + 3)
		io.IDs[b*k+j] = ids[b*k+j]
		io.Logits[b*k+j] = float32(-j)
	}
	fillLogprobs(io.Logits[b*k:b*k+k], io.Logprobs[b*k:b*k+k])
	nCand[b] = int32(n)
	io.NCand[b] = int32(n)
}

func TestLoadBuiltins(t *testing.T) {
	for _, name := range []string{"standard", "greedy", "typical", "mirostat", "dry", "xtc", "top-n-sigma"} {
		t.Run(name, func(t *testing.T) {
			m, err := load(t, testRT, false, name)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close(context.Background())
			if d := m.Descriptor(); d.Name != name || d.Candidates != m.K() || len(m.SHA256()) != 64 {
				t.Fatalf("descriptor %+v", d)
			}
			if s := m.Stats(); s.Calls != 1 || s.Failures != 0 {
				t.Fatalf("self-test stats %+v", s)
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	tests := []struct{ name, stage, want string }{
		{"badabi", "describe", "abi 2"},
		{"badparam", "describe", "outside"},
		{"importer", "imports", "env.peek"},
		{"noexport", "exports", "kvhost_sample"},
		{"liar", "self-test", "not one of its"},
		{"rewrite", "self-test", "not one of its"},
		{"trap", "self-test", "trap"},
		{"alwaysloop", "self-test", "out of fuel"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, testRT, true, tc.name)
			var re *RefusedError
			if !errors.As(err, &re) || re.Stage != tc.stage || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want a *RefusedError at %s containing %q", err, tc.stage, tc.want)
			}
		})
	}
	if _, err := testRT.Load(context.Background(), "junk", []byte("not wasm")); err == nil || !strings.Contains(err.Error(), "decode") {
		t.Fatalf("junk: %v", err)
	}
}

// TestLoopingPluginStopped: a sampler that loops forever on request is
// stopped by its fuel budget, the failure is typed, the module keeps
// serving from a fresh instance, and a concurrent goroutine keeps running.
func TestLoopingPluginStopped(t *testing.T) {
	ctx := context.Background()
	m, err := load(t, testRT, true, "loop")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	k := m.K()
	ids, nCand := make([]int32, 16*k), make([]int32, 16)
	step := func(spin float32) error {
		inst, err := m.Acquire(ctx)
		if err != nil {
			return err
		}
		defer m.Release(inst)
		for b := range 4 {
			fill(&inst.IO, k, b, k, ids, nCand)
			inst.IO.Params[b] = spin
		}
		return inst.Sample(ctx, 4, ids, nCand)
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
	if err := step(0); err != nil {
		t.Fatalf("the module stopped serving after a runaway step: %v", err)
	}
	if s := m.Stats(); s.Failures != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestStepChecksAnswers(t *testing.T) {
	ctx := context.Background()
	m, err := load(t, testRT, false, "greedy")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	inst, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids, nCand := make([]int32, 16), make([]int32, 16)
	for b := range 16 {
		fill(&inst.IO, 1, b, 1, ids, nCand)
		ids[b] = int32(b)
		inst.IO.IDs[b] = int32(b)
	}
	if err := inst.Sample(ctx, 16, ids, nCand); err != nil {
		t.Fatal(err)
	}
	for b := range 16 {
		if inst.IO.OutID[b] != int32(b) {
			t.Fatalf("row %d: %d", b, inst.IO.OutID[b])
		}
	}
	// A host copy that disagrees with what the guest saw is a contract error.
	ids[3] = 99
	err = inst.Sample(ctx, 16, ids, nCand)
	var se *StepError
	if !errors.As(err, &se) || se.Kind != StepContract {
		t.Fatalf("err %v", err)
	}
	m.Release(inst)
	if err := inst.Sample(ctx, 17, ids, nCand); err == nil {
		t.Fatal("batch over MaxBatch accepted")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []Config{{MaxBatch: -1}, {MaxBatch: 5000}, {MemoryLimitPages: 1}, {FuelBase: -1}, {Termination: 7}}
	for _, c := range tests {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
}
