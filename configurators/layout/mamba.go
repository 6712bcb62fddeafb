package layout

import (
	"fmt"

	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/guest"
)

// MambaFullMemoryRatio is mamba_full_memory_ratio's default m: without an
// explicit request cap the state takes rest·m/(1+m) (spec §3 "Mamba
// state"); the host may pass another in HostFacts.MambaFullMemoryRatio.
const MambaFullMemoryRatio = sdk.DefaultMambaFullMemoryRatio

// Mamba configures hybrid Mamba2 / gated-delta-net models: a request-scoped
// state pool (conv + SSM/temporal state per linear layer) plus token KV for
// the attention layers.
type Mamba struct{}

var _ guest.Configurator = Mamba{}

// Describe implements guest.Configurator.
func (Mamba) Describe() sdk.Descriptor {
	return sdk.Descriptor{
		Name: "mamba", Version: "2.0.0", Kind: sdk.KindConfigurator, ABI: sdk.ABIVersion,
		Architectures: []string{"Qwen3NextForCausalLM", "NemotronHForCausalLM", "FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM"},
		KVDTypes:      []string{sdk.KVFP32, sdk.KVBF16, sdk.KVFP16, sdk.KVFP8E4M3, sdk.KVFP8E5M2},
	}
}

// Configure implements guest.Configurator.
func (c Mamba) Configure(in sdk.ConfigureInput) (guest.Plan, error) { return c.Plan(in) }

// HybridLayers says which layers hold attention KV and which hold state.
// A Falcon-H1 layer holds both (parallel hybrid).
type HybridLayers struct {
	Attention []int64
	State     []int64
}

// HybridLayersOf reads the layer assignment: layer_types (Qwen3-Next
// "linear_attention"/"full_attention"), full_attention_interval (layer i is
// full when (i+1) % k == 0), hybrid_override_pattern (Nemotron-H: M mamba,
// * attention, - MLP, E MoE), or Falcon-H1's every-layer-both.
func HybridLayersOf(m *Model, layers int64) (HybridLayers, error) {
	var h HybridLayers
	types, err := m.Strings("layer_types")
	if err != nil {
		return h, err
	}
	pattern, err := m.String("hybrid_override_pattern")
	if err != nil {
		return h, err
	}
	interval, hasInterval, err := m.Int("full_attention_interval")
	if err != nil {
		return h, err
	}
	switch {
	case types != nil:
		if int64(len(types)) != layers {
			return h, fmt.Errorf("layout: model config layer_types has %d entries for %d layers", len(types), layers)
		}
		for i, t := range types {
			switch t {
			case "full_attention", "attention": // Granite-4.0-H: mamba / attention
				h.Attention = append(h.Attention, int64(i))
			case "linear_attention", "mamba":
				h.State = append(h.State, int64(i))
			default:
				return h, fmt.Errorf("layout: model config layer_types[%d] = %q: want full_attention, attention, linear_attention or mamba", i, t)
			}
		}
	case pattern != "":
		if int64(len(pattern)) != layers {
			return h, fmt.Errorf("layout: model config hybrid_override_pattern has %d layers, num_hidden_layers is %d", len(pattern), layers)
		}
		for i, c := range []byte(pattern) {
			switch c {
			case 'M':
				h.State = append(h.State, int64(i))
			case '*':
				h.Attention = append(h.Attention, int64(i))
			case '-', 'E':
			default:
				return h, fmt.Errorf("layout: model config hybrid_override_pattern[%d] = %q: want M, *, - or E", i, c)
			}
		}
	case hasInterval:
		if interval < 1 {
			return h, fmt.Errorf("layout: model config full_attention_interval = %d: want >= 1", interval)
		}
		for i := range layers {
			if (i+1)%interval == 0 {
				h.Attention = append(h.Attention, i)
			} else {
				h.State = append(h.State, i)
			}
		}
	case m.Has("mamba_d_ssm"): // Falcon-H1: attention and Mamba2 in every layer
		for i := range layers {
			h.Attention = append(h.Attention, i)
			h.State = append(h.State, i)
		}
	default:
		return h, fmt.Errorf("layout: mamba configurator: model config has no layer_types, hybrid_override_pattern or full_attention_interval")
	}
	if len(h.State) == 0 {
		return h, fmt.Errorf("layout: mamba configurator: no linear/Mamba layers; use the mha configurator")
	}
	return h, nil
}

// StateShapes are the per-layer conv and temporal (SSM) state shapes on one
// TP rank.
type StateShapes struct {
	Conv     []int64 // bf16
	Temporal []int64 // fp32
}

// StateShapesOf reads the state shapes (spec §3): GDN/Qwen3-Next conv
// ((2·kh·kd + vh·vd)/tp, kernel−1), temporal (vh/tp, kd, vd); Mamba2 conv
// ((I + 2·groups·state)/tp, kernel−1), temporal (heads/tp, head_dim, state).
func StateShapesOf(m *Model, tp int64) (StateShapes, error) {
	div := func(what string, v int64) (int64, error) {
		if v%tp != 0 {
			return 0, fmt.Errorf("layout: mamba configurator: %s = %d is not divisible by tp_size %d", what, v, tp)
		}
		return v / tp, nil
	}
	if m.Has("linear_num_value_heads") {
		kh, err := m.Positive("linear_num_key_heads")
		if err != nil {
			return StateShapes{}, err
		}
		kd, err := m.Positive("linear_key_head_dim")
		if err != nil {
			return StateShapes{}, err
		}
		vh, err := m.Positive("linear_num_value_heads")
		if err != nil {
			return StateShapes{}, err
		}
		vd, err := m.Positive("linear_value_head_dim")
		if err != nil {
			return StateShapes{}, err
		}
		kernel, err := m.Positive("linear_conv_kernel_dim")
		if err != nil {
			return StateShapes{}, err
		}
		conv, err := div("2·kh·kd + vh·vd", 2*kh*kd+vh*vd)
		if err != nil {
			return StateShapes{}, err
		}
		vhl, err := div("linear_num_value_heads", vh)
		if err != nil {
			return StateShapes{}, err
		}
		return StateShapes{Conv: []int64{conv, kernel - 1}, Temporal: []int64{vhl, kd, vd}}, nil
	}
	// Mamba2 under Nemotron-H, Falcon-H1 and Mamba2 key names.
	heads, err := m.Positive("mamba_num_heads", "mamba_n_heads", "n_mamba_heads")
	if err != nil {
		return StateShapes{}, err
	}
	var hd int64
	if auto, _ := m.String("mamba_d_head"); auto == "auto" {
		// Granite-4.0-H: mamba_expand · hidden_size / mamba_n_heads.
		hidden, err := m.Positive("hidden_size")
		if err != nil {
			return StateShapes{}, err
		}
		expand, err := m.OptionalPositive(2, "mamba_expand")
		if err != nil {
			return StateShapes{}, err
		}
		if expand*hidden%heads != 0 {
			return StateShapes{}, fmt.Errorf("layout: mamba configurator: mamba_d_head auto: mamba_expand × hidden_size = %d is not a multiple of mamba_n_heads %d", expand*hidden, heads)
		}
		hd = expand * hidden / heads
	} else if hd, err = m.Positive("mamba_head_dim", "mamba_d_head", "mamba_headdim"); err != nil {
		return StateShapes{}, err
	}
	state, err := m.Positive("ssm_state_size", "mamba_d_state", "state_size")
	if err != nil {
		return StateShapes{}, err
	}
	groups, err := m.OptionalPositive(1, "n_groups", "mamba_n_groups", "mamba_ngroups")
	if err != nil {
		return StateShapes{}, err
	}
	kernel, err := m.Positive("conv_kernel", "mamba_d_conv", "mamba_conv_kernel")
	if err != nil {
		return StateShapes{}, err
	}
	inner, err := m.OptionalPositive(heads*hd, "mamba_d_ssm")
	if err != nil {
		return StateShapes{}, err
	}
	conv, err := div("I + 2·groups·state", inner+2*groups*state)
	if err != nil {
		return StateShapes{}, err
	}
	hl, err := div("mamba heads", heads)
	if err != nil {
		return StateShapes{}, err
	}
	if kernel < 2 {
		return StateShapes{}, fmt.Errorf("layout: mamba configurator: conv kernel %d: want >= 2", kernel)
	}
	return StateShapes{Conv: []int64{conv, kernel - 1}, Temporal: []int64{hl, hd, state}}, nil
}

// Plan is Configure with the concrete result type.
func (Mamba) Plan(in sdk.ConfigureInput) (*Plan, error) {
	m, err := ParseModel(in.Model)
	if err != nil {
		return nil, err
	}
	_, dtype, err := kvStorage("mamba", in.Host.KVDType, Mamba{}.Describe().KVDTypes...)
	if err != nil {
		return nil, err
	}
	a, err := AttentionOf(m, in.Host.TPSize)
	if err != nil {
		return nil, err
	}
	layers, err := HybridLayersOf(m, a.Layers)
	if err != nil {
		return nil, err
	}
	shapes, err := StateShapesOf(m, in.Host.TPSize)
	if err != nil {
		return nil, err
	}
	if shapes.Conv[1] < 1 {
		return nil, fmt.Errorf("layout: mamba configurator: conv kernel must be >= 2")
	}
	state := newPool(PoolState, sdk.RecurrentState, 1, 0)
	for _, l := range layers.State {
		state.add("conv", sdk.RoleConv, l, "bf16", shapes.Conv...)
		state.add("temporal", sdk.RoleSSM, l, "fp32", shapes.Temporal...)
	}
	sp, err := state.done()
	if err != nil {
		return nil, err
	}
	pools := []sdk.Pool{sp}
	var kvBytes int64
	if len(layers.Attention) > 0 || in.Host.DraftLayers > 0 {
		kv := newPool(PoolKV, sdk.FullAttention, in.Host.PageSize, 0)
		for _, l := range layers.Attention {
			addMHALayer(kv, a, l, dtype, false)
		}
		for l := range in.Host.DraftLayers {
			addMHALayer(kv, a, a.Layers+l, dtype, false)
		}
		kp, err := kv.done()
		if err != nil {
			return nil, err
		}
		kvBytes = kp.BytesPerUnit
		pools = append(pools, kp)
	}
	page := in.Host.PageSize
	ratio := in.Host.MambaFullMemoryRatio
	if ratio == 0 {
		ratio = MambaFullMemoryRatio
	}
	return &Plan{pools: pools, size: func(avail, tokenCap, requestCap int64) (map[string]int64, error) {
		return mambaSize(sp.BytesPerUnit, kvBytes, ratio, page, avail, tokenCap, requestCap)
	}}, nil
}

const gib = 1 << 30

// mambaSize is spec §3's _handle_max_mamba_cache in SGLang's float
// arithmetic: K = int((rest·m/(1+m)·2^30 − per_req) // per_req) slots plus
// one padding slot, then tokens from what is left. A request cap (> 0)
// replaces the ratio: K+1 = min(K+1, request_cap) and the rest goes to KV.
// The state pool's units are K+1 (slot 0 is the padding slot).
func mambaSize(perReq, cell int64, m float64, page, avail, tokenCap, requestCap int64) (map[string]int64, error) {
	pr := float64(perReq)
	rest := float64(avail) / gib
	var k int64
	if cell == 0 {
		k = avail/perReq - 1 // no attention: every byte is state
	} else {
		budget := rest * m / (1 + m)
		k = int64(pyFloorDiv(budget*gib-pr, pr))
	}
	if requestCap > 0 && k+1 > requestCap {
		k = requestCap - 1
	}
	if k < 1 {
		return nil, fmt.Errorf("layout: not enough memory: %d bytes hold no request state slot of %d bytes (plus the padding slot)", avail, perReq)
	}
	units := map[string]int64{PoolState: k + 1}
	if cell == 0 {
		return units, nil
	}
	rest -= float64(k+1) * pr / gib
	t, err := pageTokens(int64(rest*gib), cell, page, tokenCap)
	if err != nil {
		return nil, fmt.Errorf("%w (pool %s, after %d state slots of %d bytes)", err, PoolKV, k+1, perReq)
	}
	units[PoolKV] = t
	return units, nil
}
