package boot

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/host/model/synth"
)

func writeHybridModel(t testing.TB, arch, size string) string {
	t.Helper()
	base, moe := strings.CutSuffix(arch, "-moe")
	spec, err := synth.HybridPreset(base, size, "f32")
	if err != nil {
		t.Fatal(err)
	}
	if moe {
		spec.Experts, spec.ExpertsUsed, spec.ExpertFF = 4, 2, spec.FF/2
	}
	path := filepath.Join(t.TempDir(), arch+"-"+size+".gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.WriteHybrid(f, spec); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHybridPlanMatchesServe: for the hybrid Mamba-2 models (a state pool
// of request slots beside the attention layers' KV pool, both declared by
// the mamba configurator) every phase, allocator and pool figure plan
// predicts equals what serve measures.
func TestHybridPlanMatchesServe(t *testing.T) {
	for _, arch := range []string{"nemotron_h", "granitehybrid", "granitehybrid-moe"} {
		t.Run(arch, func(t *testing.T) {
			cfg := baseConfig(writeHybridModel(t, arch, "tiny"), 192<<20)
			cfg.GraphMaxBS = -1 // asked for; hybrids decode eagerly
			s, err := Build(cfg, nil, os.Stdout)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			if n := len(s.Pools.SlotPools()); n != 1 {
				t.Fatalf("%d state pools, want the configurator's one", n)
			}
			got := s.Ledger.Snapshot()
			if err := ledger.Check(got); err != nil {
				t.Fatal(err)
			}
			want := planFor(t, cfg)
			if !reflect.DeepEqual(got.Phases, want.Ledger.Phases) {
				t.Errorf("phases:\nserve %+v\nplan  %+v", got.Phases, want.Ledger.Phases)
			}
			if !reflect.DeepEqual(got.Allocators, want.Ledger.Allocators) {
				t.Errorf("allocators:\nserve %+v\nplan  %+v", got.Allocators, want.Ledger.Allocators)
			}
			if !reflect.DeepEqual(got.KVPools, want.Ledger.KVPools) {
				t.Errorf("pools:\nserve %+v\nplan  %+v", got.KVPools, want.Ledger.KVPools)
			}
		})
	}
}
