package layout

import (
	"fmt"
	"slices"

	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/guest"
)

// FP4 configures FP4 KV (nvfp4 / fp4_mx_block16; ABI 1's "fp4" is accepted
// as an alias): packed e2m1 pairs plus one FP8 scale per 16 elements, and
// for MHA a shared FP8 dequant workspace of one layer (spec §3 "FP4 MHA",
// "MLA FP4").
type FP4 struct{}

var _ guest.Configurator = FP4{}

// Describe implements guest.Configurator.
func (FP4) Describe() sdk.Descriptor {
	return sdk.Descriptor{
		Name: "fp4", Version: "2.0.0", Kind: sdk.KindConfigurator, ABI: sdk.ABIVersion,
		Architectures: slices.Concat(MHAArchitectures, MLAArchitectures),
		KVDTypes:      []string{sdk.KVNVFP4},
	}
}

// Configure implements guest.Configurator.
func (c FP4) Configure(in sdk.ConfigureInput) (guest.Plan, error) { return c.Plan(in) }

// Plan is Configure with the concrete result type.
func (FP4) Plan(in sdk.ConfigureInput) (*Plan, error) {
	m, err := ParseModel(in.Model)
	if err != nil {
		return nil, err
	}
	if _, _, err := kvStorage("fp4", sdk.CanonicalKVDType(in.Host.KVDType), sdk.KVNVFP4); err != nil {
		return nil, err
	}
	page := in.Host.PageSize
	if m.Has("kv_lora_rank") {
		d, err := MLADimsOf(m)
		if err != nil {
			return nil, err
		}
		w := d.Rank + d.Rope
		if w%16 != 0 {
			return nil, fmt.Errorf("layout: fp4 configurator: kv_lora_rank+qk_rope_head_dim = %d is not a multiple of the 16-element scale block", w)
		}
		// MLA FP4 = MLA/2 + ((rank+rope)/16)·L.
		kv := newPool(PoolKV, sdk.LatentAttention, page, 0)
		for l := range d.Layers + in.Host.DraftLayers {
			kv.add("kv", sdk.RoleLatent, l, "fp4x2", 1, w/2)
			kv.add("kv_scale", sdk.RoleLatentScale, l, sdk.KVFP8E4M3, 1, w/16)
		}
		return tokenPlan(kv, page)
	}
	a, err := AttentionOf(m, in.Host.TPSize)
	if err != nil {
		return nil, err
	}
	if a.HeadDim%16 != 0 || a.VHeadDim%16 != 0 {
		return nil, fmt.Errorf("layout: fp4 configurator: head_dim %d / v_head_dim %d must be multiples of the 16-element scale block", a.HeadDim, a.VHeadDim)
	}
	// n·(hd+vd)·L/2 packed + n·(hd+vd)·L/16 scales + n·(hd+vd) workspace
	// (the spec writes hd+vd as 2·hd; they agree when hd = vd).
	kv := newPool(PoolKV, sdk.FullAttention, page, 0)
	for l := range a.Layers + in.Host.DraftLayers {
		kv.add("k", sdk.RoleK, l, "fp4x2", a.KVHeads, a.HeadDim/2)
		kv.add("v", sdk.RoleV, l, "fp4x2", a.KVHeads, a.VHeadDim/2)
		kv.add("k_scale", sdk.RoleKScale, l, sdk.KVFP8E4M3, a.KVHeads, a.HeadDim/16)
		kv.add("v_scale", sdk.RoleVScale, l, sdk.KVFP8E4M3, a.KVHeads, a.VHeadDim/16)
	}
	// The shared FP8 dequant workspace SGLang's FP4 MHA pool reserves per
	// token (spec §3); a device that dequantizes inside attention leaves it
	// unused, but it is part of the declared cell.
	kv.add("k_dequant", sdk.RoleWorkspace, -1, sdk.KVFP8E4M3, a.KVHeads, a.HeadDim)
	kv.add("v_dequant", sdk.RoleWorkspace, -1, sdk.KVFP8E4M3, a.KVHeads, a.VHeadDim)
	return tokenPlan(kv, page)
}
