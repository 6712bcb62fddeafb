package layout

import (
	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/guest"
)

// MLA configures DeepSeek-style latent attention: a latent pool with one
// row per layer of kv_lora_rank + qk_rope_head_dim (the compressed c_kv,
// whose first kv_lora_rank elements are the values, then the rope key),
// not split by tensor parallelism (spec §3 "MLA").
type MLA struct{}

var _ guest.Configurator = MLA{}

// MLAArchitectures are the HF architectures the mla plugin claims.
var MLAArchitectures = []string{"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "KimiK2ForCausalLM"}

// Describe implements guest.Configurator.
func (MLA) Describe() sdk.Descriptor {
	return sdk.Descriptor{
		Name: "mla", Version: "2.0.0", Kind: sdk.KindConfigurator, ABI: sdk.ABIVersion,
		Architectures: MLAArchitectures,
		KVDTypes:      []string{sdk.KVFP32, sdk.KVBF16, sdk.KVFP16, sdk.KVFP8E4M3, sdk.KVFP8E5M2},
	}
}

// Configure implements guest.Configurator.
func (c MLA) Configure(in sdk.ConfigureInput) (guest.Plan, error) { return c.Plan(in) }

// MLADims are the latent dimensions of an MLA model.
type MLADims struct {
	Rank, Rope, Layers int64
}

// MLADimsOf reads kv_lora_rank, qk_rope_head_dim and num_hidden_layers.
func MLADimsOf(m *Model) (MLADims, error) {
	rank, err := m.Positive("kv_lora_rank")
	if err != nil {
		return MLADims{}, err
	}
	rope, err := m.Positive("qk_rope_head_dim")
	if err != nil {
		return MLADims{}, err
	}
	layers, err := Layers(m)
	if err != nil {
		return MLADims{}, err
	}
	return MLADims{Rank: rank, Rope: rope, Layers: layers}, nil
}

// Plan is Configure with the concrete result type.
func (MLA) Plan(in sdk.ConfigureInput) (*Plan, error) {
	m, err := ParseModel(in.Model)
	if err != nil {
		return nil, err
	}
	_, dtype, err := kvStorage("mla", in.Host.KVDType, MLA{}.Describe().KVDTypes...)
	if err != nil {
		return nil, err
	}
	d, err := MLADimsOf(m)
	if err != nil {
		return nil, err
	}
	kv := newPool(PoolKV, sdk.LatentAttention, in.Host.PageSize, 0)
	for l := range d.Layers + in.Host.DraftLayers {
		kv.add("kv", sdk.RoleLatent, l, dtype, 1, d.Rank+d.Rope)
	}
	return tokenPlan(kv, in.Host.PageSize)
}
