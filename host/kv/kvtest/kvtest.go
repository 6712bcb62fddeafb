// Package kvtest builds KV pool sets for tests the way serve does, from a
// configurator's declaration: the built-in mha configurator's arithmetic
// (configurators/layout) declares the pools, so no test computes a cell
// size of its own.
package kvtest

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/kvhost/kvhost/configurators/layout"
	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/sdk"
)

// Uniform is the need of a model whose layers all keep a K/V cache of
// kvHeads × headDim (the Llama family's).
func Uniform(layers, kvHeads, headDim int) []kv.LayerNeed {
	out := make([]kv.LayerNeed, layers)
	for i := range out {
		out[i] = kv.LayerNeed{KVHeads: kvHeads, HeadDim: headDim, VHeadDim: headDim}
	}
	return out
}

// DeclareMHA is what the mha configurator declares for a Llama-shaped
// model with needs' shape: one full-attention pool "kv".
func DeclareMHA(needs []kv.LayerNeed, kvDType string, pageSize int) ([]sdk.Pool, error) {
	if len(needs) == 0 {
		return nil, fmt.Errorf("kvtest: no layers")
	}
	n := needs[0]
	cfg, err := json.Marshal(map[string]any{"architectures": []string{"LlamaForCausalLM"}, "num_hidden_layers": len(needs),
		"num_attention_heads": n.KVHeads, "num_key_value_heads": n.KVHeads, "head_dim": n.HeadDim})
	if err != nil {
		return nil, err
	}
	in := sdk.ConfigureInput{Model: cfg, Host: sdk.HostFacts{KVDType: kvDType, PageSize: int64(pageSize)}.WithDefaults()}
	var p *layout.Plan
	if in.Host.KVDType == sdk.KVNVFP4 {
		p, err = layout.FP4{}.Plan(in)
	} else {
		p, err = layout.MHA{}.Plan(in)
	}
	if err != nil {
		return nil, err
	}
	return p.Pools(), nil
}

// Split moves the layers of decl's single pool whose index satisfies hi
// into a second pool named "hi" of the same kind, as a configurator that
// splits a model's layers over two pools would declare them.
func Split(decl []sdk.Pool, hi func(layer int) bool) []sdk.Pool {
	lo, up := decl[0], decl[0]
	lo.Buffers, up.Buffers, lo.BytesPerUnit, up.BytesPerUnit = nil, nil, 0, 0
	up.Name = "hi"
	for _, b := range decl[0].Buffers {
		n, _ := b.Bytes()
		if b.Layer >= 0 && hi(int(b.Layer)) {
			b.Pool = up.Name
			up.Buffers, up.BytesPerUnit = append(up.Buffers, b), up.BytesPerUnit+n
		} else {
			lo.Buffers, lo.BytesPerUnit = append(lo.Buffers, b), lo.BytesPerUnit+n
		}
	}
	return append([]sdk.Pool{lo, up}, decl[1:]...)
}

// Set verifies decl against needs and allocates it with the same number of
// pages in every token pool (and that many slots in every state pool)
// through a.
func Set(t testing.TB, a *alloc.Direct, decl []sdk.Pool, needs []kv.LayerNeed, pages int) *kv.Set {
	t.Helper()
	return SetSlots(t, a, decl, needs, pages, pages)
}

// SetSlots is Set with slots slots in every state pool.
func SetSlots(t testing.TB, a *alloc.Direct, decl []sdk.Pool, needs []kv.LayerNeed, pages, slots int) *kv.Set {
	t.Helper()
	l, err := kv.NewLayout(decl, needs)
	if err != nil {
		t.Fatal(err)
	}
	units := make([]int, len(l.Pools))
	for i, p := range l.Pools {
		units[i] = pages * p.PageSize
		if !p.Tokens() {
			units[i] = slots
		}
	}
	s, err := kv.Allocate(l, units, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// DeclareMLA is what the mla configurator declares for an MLA model with
// needs' latent rows: one latent pool "kv".
func DeclareMLA(needs []kv.LayerNeed, kvDType string, pageSize int) ([]sdk.Pool, error) {
	if len(needs) == 0 || !needs[0].Latent {
		return nil, fmt.Errorf("kvtest: no latent layers")
	}
	n := needs[0]
	cfg, err := json.Marshal(map[string]any{"architectures": []string{"DeepseekV2ForCausalLM"}, "num_hidden_layers": len(needs),
		"kv_lora_rank": n.VHeadDim, "qk_rope_head_dim": n.HeadDim - n.VHeadDim})
	if err != nil {
		return nil, err
	}
	p, err := layout.MLA{}.Plan(sdk.ConfigureInput{Model: cfg, Host: sdk.HostFacts{KVDType: kvDType, PageSize: int64(pageSize)}.WithDefaults()})
	if err != nil {
		return nil, err
	}
	return p.Pools(), nil
}

// MHA is Set over DeclareMHA: one full-attention pool of pages pages (over
// DeclareMLA's latent pool when the layers are MLA's).
func MHA(t testing.TB, a *alloc.Direct, needs []kv.LayerNeed, kvDType string, pageSize, pages int) *kv.Set {
	t.Helper()
	declare := DeclareMHA
	if len(needs) > 0 && needs[0].Latent {
		declare = DeclareMLA
	}
	decl, err := declare(needs, kvDType, pageSize)
	if err != nil {
		t.Fatal(err)
	}
	return Set(t, a, decl, needs, pages)
}
