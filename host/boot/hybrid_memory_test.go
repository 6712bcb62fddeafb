package boot

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/sdk"
)

// kvElemBytes is the bytes of one cached K or V value in a KV encoding this
// test serves with.
func kvElemBytes(t *testing.T, dtype string) int64 {
	t.Helper()
	switch dtype {
	case "f32", "fp32", "float32":
		return 4
	case "f16", "fp16", "float16", "bf16", "bfloat16":
		return 2
	}
	t.Fatalf("KV encoding %q: not one this test sizes", dtype)
	return 0
}

// TestHybridFootprintPerRequest is issue 17's memory acceptance on the
// small hybrids (Nemotron-H and Granite-4.0-H, context 32k): a request's
// footprint, read from the ledger's pool figures after its slot and pages
// are really taken from the pools, at 1k, 4k and 16k tokens of context, is
// the Mamba layers' state slot — the same bytes at every length, equal to
// Σ over the Mamba layers of conv (K−1)·(I+2·G·N) bf16 + SSM H·P·N fp32 —
// plus the attention layers' KV, pages·page·(attention layers·2·kv heads·
// head dim·KV bytes): linear in the context and nothing else. The number
// of requests of each length the pools admit at once is what plan predicts
// from its own pool figures: min(slots, tokens / (pages per request·page)).
func TestHybridFootprintPerRequest(t *testing.T) {
	for _, arch := range []string{"nemotron_h", "granitehybrid"} {
		t.Run(arch, func(t *testing.T) {
			spec, err := synth.HybridPreset(arch, "small", "f32")
			if err != nil {
				t.Fatal(err)
			}
			if spec.ContextLen < 16384 {
				t.Fatalf("small %s has a context of %d tokens, the test needs 16384", arch, spec.ContextLen)
			}
			cfg := baseConfig(writeHybridModel(t, arch, "small"), 256<<20)
			s, err := Build(cfg, nil, os.Stdout)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			if len(s.Pools.TokenPools()) != 1 || len(s.Pools.SlotPools()) != 1 {
				t.Fatalf("%d token pools and %d state pools, want one of each", len(s.Pools.TokenPools()), len(s.Pools.SlotPools()))
			}
			tokens, slots := s.Pools.TokenPools()[0], s.Pools.SlotPools()[0]

			// The figures from the model's shape, independently of kv and
			// the configurator.
			mambaLayers, attnLayers := int64(strings.Count(spec.Pattern, "M")), int64(strings.Count(spec.Pattern, "*"))
			convDim := int64(spec.MambaHeads*spec.MambaHeadDim + 2*spec.Groups*spec.State)
			slotBytes := mambaLayers * (int64(spec.ConvKernel-1)*convDim*2 + int64(spec.MambaHeads*spec.MambaHeadDim*spec.State)*4)
			stat := func(unit sdk.Unit) ledger.KVPool {
				for _, p := range s.Ledger.Snapshot().KVPools {
					if p.Kind.Unit() == unit {
						return p
					}
				}
				t.Fatalf("no %s pool in the ledger", unit)
				return ledger.KVPool{}
			}
			tokBytes := attnLayers * 2 * int64(spec.KVHeads*spec.Hidden/spec.Heads) * kvElemBytes(t, stat(sdk.UnitToken).DType)
			if st := stat(sdk.UnitRequest); st.CellBytes != slotBytes || st.Layers != int(mambaLayers) {
				t.Fatalf("state pool %+v: want %d bytes per slot over %d Mamba layers", st, slotBytes, mambaLayers)
			}
			if st := stat(sdk.UnitToken); st.CellBytes != tokBytes || st.Layers != int(attnLayers) {
				t.Fatalf("KV pool %+v: want %d bytes per token over %d attention layers", st, tokBytes, attnLayers)
			}

			// used is the bytes running requests hold in each pool, from
			// the ledger.
			used := func() (mamba, attn int64) {
				st := stat(sdk.UnitRequest)
				kvs := stat(sdk.UnitToken)
				return int64(st.UsedSlots) * st.CellBytes, int64(kvs.UsedTokens) * kvs.CellBytes
			}
			page := int64(tokens.PageSize())
			var attnAt1k int64
			for _, n := range []int64{1024, 4096, 16384} {
				m0, a0 := used()
				slot, err := slots.Acquire()
				if err != nil {
					t.Fatal(err)
				}
				table, err := tokens.Grow(nil, int(n))
				if err != nil {
					t.Fatalf("%d tokens: %v", n, err)
				}
				m1, a1 := used()
				mamba, attn := m1-m0, a1-a0
				wantAttn := (n + page - 1) / page * page * tokBytes
				if mamba != slotBytes {
					t.Errorf("%d tokens: the Mamba layers hold %d bytes, want the slot's %d whatever the length", n, mamba, slotBytes)
				}
				if attn != wantAttn {
					t.Errorf("%d tokens: the attention layers hold %d bytes, want %d (%d tokens × %d bytes)", n, attn, wantAttn, n, tokBytes)
				}
				if n == 1024 {
					attnAt1k = attn
				} else if attn != attnAt1k*(n/1024) {
					t.Errorf("%d tokens: attention KV %d bytes is not %d× that of 1k (%d): not linear", n, attn, n/1024, attnAt1k)
				}
				t.Logf("%s %5d tokens: %d bytes = Mamba state %d + attention KV %d", arch, n, mamba+attn, mamba, attn)
				tokens.Release(table)
				slots.Release(slot)
			}
			if m, a := used(); m != 0 || a != 0 {
				t.Fatalf("after release the pools still hold %d + %d bytes", m, a)
			}

			// Admission: the plan's pool figures decide how many requests
			// of each length run at once; the pools admit exactly that many.
			want := planFor(t, cfg)
			var planSlots, planTokens int
			for _, p := range want.Ledger.KVPools {
				if p.Kind.Unit() == sdk.UnitRequest {
					planSlots = p.Slots
				} else {
					planTokens = p.CapacityTokens
				}
			}
			if planSlots != slots.Slots() || planTokens != tokens.Tokens() {
				t.Fatalf("plan: %d slots, %d KV tokens; serve's pools: %d slots, %d KV tokens", planSlots, planTokens, slots.Slots(), tokens.Tokens())
			}
			limits := map[string]bool{}
			for _, n := range []int{1024, 4096, 16384} {
				perReq := (n + int(page) - 1) / int(page) * int(page)
				predicted := min(planSlots, planTokens/perReq)
				var held []int32
				var tables [][]int32
				for {
					slot, err := slots.Acquire()
					if errors.Is(err, kv.ErrNoSlots) {
						limits["slots"] = true
						break
					} else if err != nil {
						t.Fatal(err)
					}
					table, err := tokens.Grow(nil, n)
					if errors.Is(err, kv.ErrNoPages) {
						slots.Release(slot)
						limits["tokens"] = true
						break
					} else if err != nil {
						t.Fatal(err)
					}
					held, tables = append(held, slot), append(tables, table)
				}
				if len(held) != predicted {
					t.Errorf("%d tokens: the pools admitted %d requests at once, plan's figures (%d slots, %d tokens) %d", n, len(held), planSlots, planTokens, predicted)
				}
				t.Logf("%s %5d tokens: %d requests at once (plan: %d slots, %d KV tokens)", arch, n, len(held), planSlots, planTokens)
				for i := range held {
					tokens.Release(tables[i])
					slots.Release(held[i])
				}
			}
			if !limits["slots"] || !limits["tokens"] {
				t.Errorf("limits reached %v: the device memory should make short requests wait for slots and long ones for KV tokens", limits)
			}
			if err := ledger.Check(s.Ledger.Snapshot()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
