package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/host/plugin/builtin"
	"github.com/kvhost/kvhost/sdk"
)

// DefaultKVDType is the KV cache dtype serve and plan use when none is
// given (--kv-cache-dtype auto on the CPU device): f16, what CPU engines
// use, half the memory of f32; its greedy text equals f32's on stories260K
// and gen-model small (host/model TestKVDTypesAgainstF32).
const DefaultKVDType = sdk.KVFP16

// hfArchitecture is the Hugging Face architecture a configurator claims
// for a kvhost architecture: its registry entry's first HF class.
func hfArchitecture(c model.Config) (*model.Arch, string, error) {
	a, ok := model.LookupArch(c.Arch)
	if !ok {
		return nil, "", fmt.Errorf("plan: no Hugging Face architecture for %q (registered: %v)", c.Arch, model.Archs())
	}
	return a, a.HF[0], nil
}

// claimedClass is the architecture a configurator is asked about: the
// first of the model config's "architectures", the config the
// configurator reads (a GGUF model's ConfigJSON: its registry entry's
// first HF class, or the class its Arch.ConfigJSON names, e.g.
// MistralForCausalLM for a llama GGUF with a sliding window).
func claimedClass(cfg json.RawMessage) (string, error) {
	var m struct {
		Architectures []string `json:"architectures"`
	}
	if err := json.Unmarshal(cfg, &m); err != nil {
		return "", fmt.Errorf("plan: model config: %w", err)
	}
	if len(m.Architectures) == 0 || m.Architectures[0] == "" {
		return "", fmt.Errorf("plan: model config names no architectures")
	}
	return m.Architectures[0], nil
}

// ConfigJSON is the Hugging Face config.json equivalent of c (what a GGUF
// header implies), the model half of a configurator's input: the common
// fields, and the architecture's own (Arch.ConfigJSON).
func ConfigJSON(c model.Config) (json.RawMessage, error) {
	a, class, err := hfArchitecture(c)
	if err != nil {
		return nil, err
	}
	out := map[string]any{
		"architectures": []string{class}, "model_type": c.Arch,
		"hidden_size": c.Hidden, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim, "intermediate_size": c.Intermediate,
		"vocab_size": c.Vocab, "max_position_embeddings": c.ContextLen,
	}
	if a.ConfigJSON != nil {
		a.ConfigJSON(c, out)
	}
	return json.Marshal(out)
}

// KVRequest is what the configurator is asked: the model (its own
// config.json when it has one, else the equivalent of Config) and the host
// facts serve runs with.
type KVRequest struct {
	Config model.Config
	// HFConfig is the model's config.json, passed verbatim; nil passes
	// ConfigJSON(Config) (a GGUF file).
	HFConfig json.RawMessage
	// KVDType is --kv-cache-dtype in the sdk's spelling (fp32, fp16, bf16,
	// fp8_e4m3, fp8_e5m2, mxfp8, nvfp4); "" is DefaultKVDType.
	KVDType        string
	PageSize       int
	TP             int
	MaxRunning     int
	ChunkedPrefill int
	// SGLangCompat asks the configurator for SGLang's sizing (spec §3)
	// where its own differs (sdk.HostFacts.SGLangCompat).
	SGLangCompat bool
}

// KVConfig is the KV layout a configurator plugin declared for a model,
// verified against the model's layers (kv.NewLayout): what serve allocates.
type KVConfig struct {
	Plugin  string `json:"plugin"`
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
	KVDType string `json:"kv_dtype"`
	// Pool names the token pool whose tokens Budget.Tokens counts (Primary).
	Pool string `json:"pool"`
	// CellBytes is the bytes per token over the token pools (the spec's
	// cell when there is one pool; a GPU plan reports its main pool's).
	CellBytes int64      `json:"cell_bytes"`
	Layout    *kv.Layout `json:"layout"`
	layout    *plugin.Layout
	loadedAs  string // the registry's name of the plugin (its file's)
}

// LoadedAs is the registry's name of the configurator that declared the
// layout (Registry.Unload's argument), which may differ from the name its
// descriptor gives.
func (k KVConfig) LoadedAs() string { return k.loadedAs }

// ErrNoConfigurators means the registry holds no configurator plugins: the
// binary was built without `make plugins` and no --plugins folder was given.
var ErrNoConfigurators = errors.New("plan: no KV configurator plugins are available (build them with `make plugins`, or pass --plugins DIR)")

// ConfigureKV asks the configurator that claims the model's architecture,
// accepts the KV dtype and does not decline the model (plugin.Registry.
// Configure: a Mistral with a sliding window smaller than its context is
// the swa plugin's, any other the mha plugin's) for its declaration
// (spec §3) and verifies it
// against the model's layers: the layout the host will allocate, and
// nothing else (the host computes no cell size of its own).
func ConfigureKV(ctx context.Context, reg *plugin.Registry, req KVRequest) (KVConfig, error) {
	if len(reg.Names()) == 0 {
		return KVConfig{}, ErrNoConfigurators
	}
	c := req.Config
	cfg := req.HFConfig
	if cfg == nil {
		var err error
		if cfg, err = ConfigJSON(c); err != nil {
			return KVConfig{}, err
		}
	}
	arch, err := claimedClass(cfg)
	if err != nil {
		return KVConfig{}, err
	}
	dtype := sdk.CanonicalKVDType(req.KVDType)
	if dtype == "" {
		dtype = DefaultKVDType
	}
	tp := max(1, req.TP)
	p, l, err := reg.Configure(ctx, arch, dtype, sdk.ConfigureInput{Model: cfg, Host: sdk.HostFacts{KVDType: dtype, PageSize: int64(req.PageSize), TPSize: int64(tp),
		ContextLength: int64(c.ContextLen), MaxRunningRequests: int64(max(0, req.MaxRunning)), ChunkedPrefill: int64(max(0, req.ChunkedPrefill)),
		SGLangCompat: req.SGLangCompat}})
	if err != nil {
		return KVConfig{}, err
	}
	needs := c.KVNeeds()
	for i := range needs { // KV heads are split over tensor-parallel ranks (spec §3)
		if needs[i].KVHeads > 0 { // layers without attention (Mamba, MLP) keep none
			needs[i].KVHeads = max(1, needs[i].KVHeads/tp)
		}
	}
	lay, err := kv.NewLayout(l.Pools, needs)
	if err != nil {
		return KVConfig{}, fmt.Errorf("plan: configurator %s: %w", p.Name(), err)
	}
	d := p.Descriptor()
	return KVConfig{Plugin: d.Name, Version: d.Version, SHA256: p.SHA256(), KVDType: dtype, Pool: lay.Pools[Primary(lay)].Name,
		CellBytes: lay.TokenBytes(), Layout: lay, layout: l, loadedAs: p.Name()}, nil
}

// StoredAs is the device's name of the KV encoding (f32, f16, bf16,
// fp8_e4m3, fp8_e5m2, mxfp8, nvfp4: --kv-cache-dtype's spellings), which
// the pools report too.
func (k KVConfig) StoredAs() string {
	d, err := device.ParseKVDType(k.KVDType)
	if err != nil {
		return k.KVDType
	}
	return d.String()
}

// Recalled reports whether the configurator's declaration is its recorded
// answer to this exact input (plugin.Config.RecallAnswers), not a new call.
func (k KVConfig) Recalled() bool { return k.layout != nil && k.layout.Recalled }

// Record is kc without its live plugin handle, for budgets and JSON.
func (k KVConfig) Record() *KVConfig {
	k.layout = nil
	return &k
}

// Size asks the configurator for every pool's units (tokens or slots) in
// available bytes under the caps (0: none), in Layout.Pools order; the
// host checks the answer (plugin.Layout.Size: Σ units × bytes ≤ available,
// caps, whole pages).
func (k KVConfig) Size(ctx context.Context, available int64, tokenCap, requestCap int) ([]int, error) {
	if k.layout == nil {
		return nil, fmt.Errorf("plan: configurator %s: no live plugin to size the pools", k.Plugin)
	}
	units, err := k.layout.Size(ctx, available, int64(tokenCap), int64(requestCap))
	if err != nil {
		return nil, err
	}
	out := make([]int, len(k.Layout.Pools))
	for i, p := range k.Layout.Pools {
		out[i] = int(units[p.Name])
	}
	return out, nil
}

var (
	defaultRegOnce sync.Once
	defaultReg     *plugin.Registry
	defaultRegErr  error
)

// DefaultConfigurators is the process's registry of the built-in
// configurators (no plugins folder), shared by every caller.
func DefaultConfigurators() (*plugin.Registry, error) {
	defaultRegOnce.Do(func() {
		rt, err := plugin.NewRuntime(context.Background(), plugin.Config{})
		if err != nil {
			defaultRegErr = err
			return
		}
		defaultReg, defaultRegErr = plugin.NewRegistry(rt, builtin.FS(), "")
	})
	return defaultReg, defaultRegErr
}
