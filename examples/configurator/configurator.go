// Command gqaconfigurator is a KV-pool configurator written outside the
// kvhost tree, against its sdk only: it is what README.md's "Write a
// configurator" builds. It claims Llama-family GQA models and
//
//   - reads the model's shape under Hugging Face's key names or Meta's
//     original params.json names (n_layers, n_heads, n_kv_heads, dim), so a
//     model whose config uses the latter is served too;
//   - splits the layers over two full-attention pools, "even" and "odd"
//     (e.g. to place them in different memory), sized to the same tokens;
//   - reserves an extra per-token buffer, "token_ids" (one int32 per token,
//     a workspace no layer reads: room for a prefix cache's bookkeeping).
//
// The arithmetic is in this file (tested natively with guest.Recorder);
// main_wasip1.go registers it when built for the host:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o gqa-example.wasm .
package main

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/guest"
)

// GQA is the configurator.
type GQA struct{}

var _ guest.Configurator = GQA{}

// Describe names the plugin and what it claims.
func (GQA) Describe() sdk.Descriptor {
	return sdk.Descriptor{Name: "gqa-example", Version: "1.0.0", Architectures: []string{"LlamaForCausalLM"},
		KVDTypes: []string{sdk.KVFP32, sdk.KVFP16, sdk.KVBF16}}
}

// shape is what the pools are built from.
type shape struct{ layers, kvHeads, headDim int64 }

// read takes the first present key of each list.
func read(model json.RawMessage) (shape, error) {
	var m map[string]any
	if err := json.Unmarshal(model, &m); err != nil {
		return shape{}, err
	}
	get := func(keys ...string) (int64, bool) {
		for _, k := range keys {
			if v, ok := m[k].(float64); ok && v >= 1 && v == math.Trunc(v) {
				return int64(v), true
			}
		}
		return 0, false
	}
	layers, ok1 := get("num_hidden_layers", "n_layers")
	heads, ok2 := get("num_attention_heads", "n_heads")
	hidden, ok3 := get("hidden_size", "dim")
	if !ok1 || !ok2 || !ok3 {
		return shape{}, fmt.Errorf("gqa-example: the config needs layers, heads and width (num_hidden_layers/n_layers, num_attention_heads/n_heads, hidden_size/dim)")
	}
	kv, ok := get("num_key_value_heads", "n_kv_heads")
	if !ok {
		kv = heads
	}
	hd, ok := get("head_dim")
	if !ok {
		hd = hidden / heads
	}
	return shape{layers: layers, kvHeads: kv, headDim: hd}, nil
}

// Configure declares the two pools.
func (GQA) Configure(in sdk.ConfigureInput) (guest.Plan, error) {
	s, err := read(in.Model)
	if err != nil {
		return nil, err
	}
	dtype, _ := sdk.KVStorageDType(in.Host.KVDType)
	kvHeads := max(1, s.kvHeads/in.Host.TPSize)
	page := in.Host.PageSize
	pools := []sdk.Pool{
		{Name: "even", Kind: sdk.FullAttention, PageSize: page},
		{Name: "odd", Kind: sdk.FullAttention, PageSize: page},
	}
	add := func(p *sdk.Pool, b sdk.Buffer) {
		b.Pool = p.Name
		n, _ := b.Bytes()
		p.Buffers, p.BytesPerUnit = append(p.Buffers, b), p.BytesPerUnit+n
	}
	for l := range s.layers {
		p := &pools[l%2]
		add(p, sdk.Buffer{Name: "k", Role: sdk.RoleK, Layer: int32(l), Shape: []int64{kvHeads, s.headDim}, DType: dtype})
		add(p, sdk.Buffer{Name: "v", Role: sdk.RoleV, Layer: int32(l), Shape: []int64{kvHeads, s.headDim}, DType: dtype})
	}
	add(&pools[0], sdk.Buffer{Name: "token_ids", Role: sdk.RoleWorkspace, Layer: -1, Shape: []int64{1}, DType: "int32"})
	if s.layers < 2 {
		pools = pools[:1]
	}
	return plan{pools: pools, page: page}, nil
}

type plan struct {
	pools []sdk.Pool
	page  int64
}

func (p plan) Pools() []sdk.Pool { return p.pools }

// Size gives every pool the same tokens: the budget over the summed cells,
// capped, in whole pages.
func (p plan) Size(available, tokenCap, _ int64) (map[string]int64, error) {
	var cell int64
	for _, q := range p.pools {
		cell += q.BytesPerUnit
	}
	t := available / cell
	if tokenCap > 0 {
		t = min(t, tokenCap)
	}
	t = t / p.page * p.page
	if t == 0 {
		return nil, fmt.Errorf("gqa-example: not enough memory: %d bytes hold no page of %d tokens at %d bytes per token", available, p.page, cell)
	}
	out := map[string]int64{}
	for _, q := range p.pools {
		out[q.Name] = t
	}
	return out, nil
}
