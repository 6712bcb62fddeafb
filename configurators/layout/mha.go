package layout

import (
	"fmt"

	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/guest"
)

// MHA configures MHA/GQA models: K and V per layer, kv_heads × head_dim
// each (spec §3 "MHA/GQA", "FP8", "MXFP8", "EAGLE/standalone draft").
type MHA struct{}

var _ guest.Configurator = MHA{}

// MHAArchitectures are the HF architectures the mha plugin claims (of
// OptionalWindowArchitectures, the configs without a served window).
var MHAArchitectures = []string{
	"LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM",
	"Qwen2ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
	"Phi3ForCausalLM", "GemmaForCausalLM", "GraniteForCausalLM", "OlmoForCausalLM", "Olmo2ForCausalLM",
}

// Describe implements guest.Configurator.
func (MHA) Describe() sdk.Descriptor {
	return sdk.Descriptor{
		Name: "mha", Version: "2.0.0", Kind: sdk.KindConfigurator, ABI: sdk.ABIVersion,
		Architectures: MHAArchitectures,
		KVDTypes:      []string{sdk.KVFP32, sdk.KVBF16, sdk.KVFP16, sdk.KVFP8E4M3, sdk.KVFP8E5M2, sdk.KVMXFP8},
	}
}

// Configure implements guest.Configurator.
func (c MHA) Configure(in sdk.ConfigureInput) (guest.Plan, error) { return c.Plan(in) }

// Plan is Configure with the concrete result type.
func (MHA) Plan(in sdk.ConfigureInput) (*Plan, error) {
	m, err := ParseModel(in.Model)
	if err != nil {
		return nil, err
	}
	if err := declineOptionalWindow("mha", false, m, in.Host); err != nil {
		return nil, err
	}
	_, dtype, err := kvStorage("mha", in.Host.KVDType, MHA{}.Describe().KVDTypes...)
	if err != nil {
		return nil, err
	}
	a, err := AttentionOf(m, in.Host.TPSize)
	if err != nil {
		return nil, err
	}
	kv := newPool(PoolKV, sdk.FullAttention, in.Host.PageSize, 0)
	// Draft (EAGLE/MTP) layers hold the same per-layer cells after the
	// target's layers: int(cell·(1+D/L)) of spec §3 without float rounding.
	for l := range a.Layers + in.Host.DraftLayers {
		addMHALayer(kv, a, l, dtype, in.Host.KVDType == sdk.KVMXFP8)
	}
	return tokenPlan(kv, in.Host.PageSize)
}

func addMHALayer(kv *poolBuilder, a Attention, layer int64, dtype string, mx bool) {
	kv.add("k", sdk.RoleK, layer, dtype, a.KVHeads, a.HeadDim)
	kv.add("v", sdk.RoleV, layer, dtype, a.KVHeads, a.VHeadDim)
	if mx {
		// MXFP8: one e8m0 scale per 32 elements (spec §3 "MXFP8").
		kv.add("k_scale", sdk.RoleKScale, layer, "fp8_e8m0", a.KVHeads, ceilDiv(a.HeadDim, 32))
		kv.add("v_scale", sdk.RoleVScale, layer, "fp8_e8m0", a.KVHeads, ceilDiv(a.VHeadDim, 32))
	}
}

// tokenPlan sizes a single token pool by spec §3's T rule.
func tokenPlan(b *poolBuilder, page int64) (*Plan, error) {
	pool, err := b.done()
	if err != nil {
		return nil, err
	}
	return &Plan{pools: []sdk.Pool{pool}, size: func(avail, tokenCap, _ int64) (map[string]int64, error) {
		t, err := pageTokens(avail, pool.BytesPerUnit, page, tokenCap)
		if err != nil {
			return nil, fmt.Errorf("%w (pool %s)", err, pool.Name)
		}
		return map[string]int64{pool.Name: t}, nil
	}}, nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
