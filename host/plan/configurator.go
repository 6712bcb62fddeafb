package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/kvhost/kvhost/host/model"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/host/plugin/builtin"
	"github.com/kvhost/kvhost/sdk"
)

// KVDType is what the CPU device stores K and V as.
const KVDType = sdk.KVFP32

// hfArchitecture names the Hugging Face architecture a configurator claims
// for each kvhost architecture.
var hfArchitecture = map[string]string{
	"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
	"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
}

// ConfigJSON is the Hugging Face config.json equivalent of c (what a GGUF
// header implies), the model half of a configurator's input.
func ConfigJSON(c model.Config) (json.RawMessage, error) {
	arch, ok := hfArchitecture[c.Arch]
	if !ok {
		return nil, fmt.Errorf("plan: no Hugging Face architecture for %q", c.Arch)
	}
	return json.Marshal(map[string]any{
		"architectures": []string{arch}, "model_type": c.Arch,
		"hidden_size": c.Hidden, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim, "intermediate_size": c.Intermediate,
		"vocab_size": c.Vocab, "max_position_embeddings": c.ContextLen,
	})
}

// KVConfig is the KV layout a configurator plugin declared for a model.
type KVConfig struct {
	Plugin  string `json:"plugin"`
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
	Pool    string `json:"pool"`
	// CellBytes is the plugin's bytes per token over all layers.
	CellBytes int64 `json:"cell_bytes"`
	layout    *plugin.Layout
}

// ErrNoConfigurators means the registry holds no configurator plugins: the
// binary was built without `make plugins` and no --plugins folder was given.
var ErrNoConfigurators = errors.New("plan: no KV configurator plugins are available (build them with `make plugins`, or pass --plugins DIR)")

// ConfigureKV asks the configurator that claims c's architecture for its
// layout (spec §3) and turns it into the arena layout the CPU device
// stores: one buffer per declared K/V buffer, each of equal row bytes. It
// refuses a plugin whose layout disagrees with what the device stores.
func ConfigureKV(ctx context.Context, reg *plugin.Registry, c model.Config, pageSize int) (KVConfig, Layout, error) {
	if len(reg.Names()) == 0 {
		return KVConfig{}, Layout{}, ErrNoConfigurators
	}
	cfg, err := ConfigJSON(c)
	if err != nil {
		return KVConfig{}, Layout{}, err
	}
	p, err := reg.ForArchitecture(ctx, hfArchitecture[c.Arch], KVDType)
	if err != nil {
		return KVConfig{}, Layout{}, err
	}
	l, err := p.Configure(ctx, sdk.ConfigureInput{Model: cfg, Host: sdk.HostFacts{KVDType: KVDType, PageSize: int64(pageSize), TPSize: 1, ContextLength: int64(c.ContextLen)}})
	if err != nil {
		return KVConfig{}, Layout{}, err
	}
	d := p.Descriptor()
	kc := KVConfig{Plugin: d.Name, Version: d.Version, SHA256: p.SHA256(), layout: l}
	if len(l.Pools) != 1 || l.Pools[0].Unit() != sdk.UnitToken {
		return KVConfig{}, Layout{}, fmt.Errorf("plan: configurator %s declared %d pools; the CPU device serves one token pool", d.Name, len(l.Pools))
	}
	pool := l.Pools[0]
	kc.Pool, kc.CellBytes = pool.Name, pool.BytesPerUnit
	var row int64
	for _, b := range pool.Buffers {
		n, err := b.Bytes()
		if err != nil {
			return KVConfig{}, Layout{}, err
		}
		if row != 0 && n != row {
			return KVConfig{}, Layout{}, fmt.Errorf("plan: configurator %s declared buffers of %d and %d bytes per token; the CPU arena holds equal rows", d.Name, row, n)
		}
		row = n
	}
	lay := Layout{Buffers: len(pool.Buffers), RowBytes: row, PageSize: pageSize}
	if want := int64(2*c.Layers) * int64(c.KVRow()) * 4; lay.CellBytes() != want || lay.Buffers != 2*c.Layers {
		return KVConfig{}, Layout{}, fmt.Errorf("plan: configurator %s declared %d buffers, %d bytes per token; the CPU device stores %d buffers, %d bytes per token",
			d.Name, lay.Buffers, lay.CellBytes(), 2*c.Layers, want)
	}
	return kc, lay, nil
}

// Record is kc without its live plugin handle, for budgets and JSON.
func (k KVConfig) Record() *KVConfig {
	k.layout = nil
	return &k
}

// Units asks the configurator how many tokens available bytes hold under
// tokenCap (the granularity-aware bound the host computed); the host checks
// the answer (plugin.Layout.Size verifies Σ units × bytes ≤ available).
func (k KVConfig) Units(ctx context.Context, available int64, tokenCap int) (int, error) {
	if k.layout == nil {
		return tokenCap, nil
	}
	units, err := k.layout.Size(ctx, available, int64(tokenCap), 0)
	if err != nil {
		return 0, err
	}
	return int(units[k.Pool]), nil
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
