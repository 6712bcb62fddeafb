package boot

import (
	"context"
	"os"
	"testing"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/host/plan"
)

// TestRecordedProfileMatchesExecuted: the runtime peak boot measures by
// recording the profile forwards (captured, never launched) equals, to the
// byte, the peak of running the same forwards — for several shapes of
// model, pool layout, KV encoding and LM-head chunking — and is what the
// stack's budget holds.
func TestRecordedProfileMatchesExecuted(t *testing.T) {
	tiny, small := writeModel(t, "tiny"), writeModel(t, "small")
	hd32 := writeSpec(t, synth.Spec{Name: "hd32", Hidden: 128, Layers: 2, Heads: 4, KVHeads: 2, Intermediate: 384, Vocab: 32000, ContextLen: 512, DType: "f32", Seed: 7})
	cases := []struct {
		name string
		cfg  func(t *testing.T) Config
	}{
		{"tiny", func(t *testing.T) Config { return baseConfig(tiny, 192<<20) }},
		{"tiny graphs", func(t *testing.T) Config { c := baseConfig(tiny, 192<<20); c.GraphMaxBS = 4; return c }},
		{"tiny logprob chunks", func(t *testing.T) Config { c := baseConfig(tiny, 192<<20); c.LogprobChunk = 48; return c }},
		{"small", func(t *testing.T) Config {
			c := baseConfig(small, 320<<20)
			c.MaxRunning, c.ChunkedPrefill, c.PageSize = 4, 100, 1
			return c
		}},
		{"tiny q4_0", func(t *testing.T) Config { return baseConfig(quantizeModel(t, tiny), 192<<20) }},
		{"mxfp8 KV", func(t *testing.T) Config { c := baseConfig(hd32, 192<<20); c.KVCacheDType = "mxfp8"; return c }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg(t)
			s, err := Build(cfg, nil, os.Stdout)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			// The engine owns the device while it runs: stop it first.
			if err := s.Engine.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			rec, ok := s.Dev.(device.Recorder)
			if !ok {
				t.Fatal("the CPU device is not a device.Recorder")
			}
			c := s.Model.Config
			batches := plan.ProfileBatches(c.ContextLen, cfg.ChunkedPrefill, cfg.MaxRunning)
			recorded, err := profileWith(rec, s.Model, s.Act, s.Pools, batches, cfg.ChunkedPrefill)
			if err != nil {
				t.Fatal(err)
			}
			executed, err := profileWith(nil, s.Model, s.Act, s.Pools, batches, cfg.ChunkedPrefill)
			if err != nil {
				t.Fatal(err)
			}
			if recorded <= 0 || recorded != executed {
				t.Fatalf("recorded profile peak %d B, executed %d B: they must be equal and positive", recorded, executed)
			}
			if s.Budget.ProfilePeakBytes != executed {
				t.Fatalf("the budget's profile peak is %d B, the executed forwards' %d B", s.Budget.ProfilePeakBytes, executed)
			}
		})
	}
}

// TestRecordingRunsNoKernel: a recorded profile forward leaves the KV
// cache as it found it (the executed one writes every position it covers),
// so what boot saves is the forwards' compute.
func TestRecordingRunsNoKernel(t *testing.T) {
	cfg := baseConfig(writeModel(t, "tiny"), 192<<20)
	s, err := Build(cfg, nil, os.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if err := s.Engine.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := s.Model.Config
	batches := plan.ProfileBatches(c.ContextLen, cfg.ChunkedPrefill, cfg.MaxRunning)
	kvBytes := func() []byte {
		l := s.Pools.Layer(0)
		b, err := s.Dev.(interface {
			Bytes(device.Ptr, int64) ([]byte, error)
		}).Bytes(l.K.Ptr, l.K.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), b...)
	}
	before := kvBytes()
	if _, err := profileWith(s.Dev.(device.Recorder), s.Model, s.Act, s.Pools, batches, cfg.ChunkedPrefill); err != nil {
		t.Fatal(err)
	}
	if string(kvBytes()) != string(before) {
		t.Fatal("a recorded profile forward wrote the KV cache: it ran its kernels")
	}
	if _, err := profileWith(nil, s.Model, s.Act, s.Pools, batches, cfg.ChunkedPrefill); err != nil {
		t.Fatal(err)
	}
	if string(kvBytes()) == string(before) {
		t.Fatal("an executed profile forward left the KV cache unchanged: this test cannot tell recording from running")
	}
}
