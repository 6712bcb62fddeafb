package layout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
)

// Model is a parsed HF config.json. Keys of a nested "text_config" (Gemma-3
// and other multimodal wrappers) fill keys missing at the top level.
type Model struct {
	fields map[string]json.RawMessage
}

// ParseModel decodes a config.json object.
func ParseModel(raw []byte) (*Model, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("layout: model config: %w", err)
	}
	if top == nil {
		return nil, fmt.Errorf("layout: model config: want a JSON object")
	}
	if tc, ok := top["text_config"]; ok && !isNull(tc) {
		var inner map[string]json.RawMessage
		if err := json.Unmarshal(tc, &inner); err != nil {
			return nil, fmt.Errorf("layout: model config text_config: %w", err)
		}
		for k, v := range inner {
			if _, ok := top[k]; !ok {
				top[k] = v
			}
		}
	}
	return &Model{fields: top}, nil
}

func isNull(b json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(b), []byte("null")) }

// Int returns the first present, non-null key among keys as an integer.
func (m *Model) Int(keys ...string) (int64, bool, error) {
	for _, k := range keys {
		raw, ok := m.fields[k]
		if !ok || isNull(raw) {
			continue
		}
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil {
			return 0, false, fmt.Errorf("layout: model config %s: want a number, got %s", k, truncate(raw))
		}
		if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return 0, false, fmt.Errorf("layout: model config %s: want an integer, got %s", k, truncate(raw))
		}
		return int64(f), true, nil
	}
	return 0, false, nil
}

// Positive returns a required positive integer, naming the key when absent.
func (m *Model) Positive(keys ...string) (int64, error) {
	v, ok, err := m.Int(keys...)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("layout: model config lacks %s", keys[0])
	}
	if v < 1 || v > 1<<24 {
		return 0, fmt.Errorf("layout: model config %s = %d: want 1..%d", keys[0], v, 1<<24)
	}
	return v, nil
}

// OptionalPositive is Positive with a default for an absent key.
func (m *Model) OptionalPositive(def int64, keys ...string) (int64, error) {
	if _, ok, err := m.Int(keys...); err != nil || !ok {
		return def, err
	}
	return m.Positive(keys...)
}

// String returns a string key ("" when absent or null).
func (m *Model) String(key string) (string, error) {
	raw, ok := m.fields[key]
	if !ok || isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("layout: model config %s: want a string, got %s", key, truncate(raw))
	}
	return s, nil
}

// Strings returns a string-list key (nil when absent or null).
func (m *Model) Strings(key string) ([]string, error) {
	raw, ok := m.fields[key]
	if !ok || isNull(raw) {
		return nil, nil
	}
	var s []string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("layout: model config %s: want a list of strings, got %s", key, truncate(raw))
	}
	return s, nil
}

// Architecture returns architectures[0], or "" when absent.
func (m *Model) Architecture() string {
	a, err := m.Strings("architectures")
	if err != nil || len(a) == 0 {
		return ""
	}
	return a[0]
}

// Has reports whether a key is present and non-null.
func (m *Model) Has(key string) bool {
	raw, ok := m.fields[key]
	return ok && !isNull(raw)
}

func truncate(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

// defaultHeadDim holds head_dim for architectures whose config.json omits
// it because it equals the transformers default (Gemma-3's text config
// defaults head_dim to 256, which is not hidden_size/heads: 3840/16 = 240
// for the 12B model).
var defaultHeadDim = map[string]int64{
	"Gemma3ForCausalLM":              256,
	"Gemma3ForConditionalGeneration": 256,
}

// Attention is the per-rank shape of one attention layer's KV.
type Attention struct {
	KVHeads  int64 // local KV heads: max(1, kv_heads/tp) (spec §3)
	HeadDim  int64
	VHeadDim int64
	Layers   int64 // num_hidden_layers
}

// AttentionOf reads the attention shape: head_dim from the config or
// hidden_size/num_attention_heads, v_head_dim when given, KV heads split
// over tensor parallelism.
func AttentionOf(m *Model, tp int64) (Attention, error) {
	layers, err := Layers(m)
	if err != nil {
		return Attention{}, err
	}
	heads, err := m.Positive("num_attention_heads", "n_head")
	if err != nil {
		return Attention{}, err
	}
	kv, err := m.OptionalPositive(heads, "num_key_value_heads", "num_kv_heads")
	if err != nil {
		return Attention{}, err
	}
	hd, ok, err := m.Int("head_dim")
	if err != nil {
		return Attention{}, err
	}
	if d, known := defaultHeadDim[m.Architecture()]; !ok && known {
		hd, ok = d, true
	}
	if !ok {
		hidden, err := m.Positive("hidden_size", "n_embd")
		if err != nil {
			return Attention{}, err
		}
		hd = hidden / heads
	}
	if hd < 1 {
		return Attention{}, fmt.Errorf("layout: model config head_dim %d: want >= 1", hd)
	}
	vd, err := m.OptionalPositive(hd, "v_head_dim")
	if err != nil {
		return Attention{}, err
	}
	return Attention{KVHeads: max(1, kv/tp), HeadDim: hd, VHeadDim: vd, Layers: layers}, nil
}

// MaxLayers bounds num_hidden_layers; no published model comes near it.
const MaxLayers = 4096

// Layers reads num_hidden_layers, refusing more than MaxLayers.
func Layers(m *Model) (int64, error) {
	l, err := m.Positive("num_hidden_layers", "n_layer", "num_layers")
	if err != nil {
		return 0, err
	}
	if l > MaxLayers {
		return 0, fmt.Errorf("layout: model config num_hidden_layers = %d: want at most %d", l, MaxLayers)
	}
	return l, nil
}
