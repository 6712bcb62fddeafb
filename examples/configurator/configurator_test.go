package main

import (
	"testing"

	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/guest"
)

// TestKeyNames: Meta's params.json names declare the same pools as
// Hugging Face's, and the pools add up.
func TestKeyNames(t *testing.T) {
	hf := `{"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 256}`
	meta := `{"n_layers": 4, "n_heads": 8, "n_kv_heads": 2, "dim": 256}`
	var got [2][]sdk.Pool
	for i, cfg := range []string{hf, meta} {
		rec := &guest.Recorder{}
		d := guest.NewDispatcher(GQA{}, rec)
		if st := d.Configure([]byte(`{"model":` + cfg + `,"host":{"kv_dtype":"fp16","page_size":16}}`)); st != sdk.StatusOK {
			t.Fatalf("%s: %s", cfg, d.LastError())
		}
		for _, p := range rec.Pools {
			if err := p.Check(); err != nil {
				t.Fatal(err)
			}
		}
		got[i] = rec.Pools
	}
	// even: layers 0, 2 (K+V of 2×32 fp16 = 256 B each) + 4 B of token ids.
	if len(got[1]) != 2 || got[1][0].BytesPerUnit != 2*256+4 || got[1][1].BytesPerUnit != 2*256 || got[0][0].BytesPerUnit != got[1][0].BytesPerUnit {
		t.Fatalf("pools %+v / %+v", got[0], got[1])
	}
}
