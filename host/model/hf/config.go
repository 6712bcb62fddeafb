package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Config holds the Llama-family fields of config.json. Absent fields are
// zero; see the methods for the conventional defaults.
type Config struct {
	Architectures         []string     `json:"architectures"`
	ModelType             string       `json:"model_type"`
	HiddenSize            int          `json:"hidden_size"`
	NumHiddenLayers       int          `json:"num_hidden_layers"`
	NumAttentionHeads     int          `json:"num_attention_heads"`
	NumKeyValueHeads      int          `json:"num_key_value_heads"`
	HeadDim               int          `json:"head_dim"`
	IntermediateSize      int          `json:"intermediate_size"`
	VocabSize             int          `json:"vocab_size"`
	RMSNormEps            float64      `json:"rms_norm_eps"`
	RopeTheta             float64      `json:"rope_theta"`
	RopeScaling           *RopeScaling `json:"rope_scaling"`
	MaxPositionEmbeddings int          `json:"max_position_embeddings"`
	TieWordEmbeddings     bool         `json:"tie_word_embeddings"`
	// AttentionBias is what config.json says; Qwen2 has q/k/v biases
	// without declaring them, so check the tensors too.
	AttentionBias bool     `json:"attention_bias"`
	TorchDType    string   `json:"torch_dtype"`
	BOSTokenID    TokenIDs `json:"bos_token_id"`
	EOSTokenID    TokenIDs `json:"eos_token_id"`
}

// RopeScaling is config.json's rope_scaling. Type comes from "rope_type",
// or from the older "type" key when rope_type is absent.
type RopeScaling struct {
	Type                          string  `json:"rope_type"`
	Factor                        float64 `json:"factor"`
	LowFreqFactor                 float64 `json:"low_freq_factor"`
	HighFreqFactor                float64 `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings"`
}

// UnmarshalJSON accepts both "rope_type" and the legacy "type".
func (r *RopeScaling) UnmarshalJSON(b []byte) error {
	type plain RopeScaling
	var aux struct {
		plain
		LegacyType string `json:"type"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*r = RopeScaling(aux.plain)
	if r.Type == "" {
		r.Type = aux.LegacyType
	}
	return nil
}

// TokenIDs is a token id field that config files write as a number, a list
// of numbers or null.
type TokenIDs []int

// UnmarshalJSON accepts an integer, a list of integers or null.
func (t *TokenIDs) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*t = nil
		return nil
	}
	if len(b) > 0 && b[0] == '[' {
		var ids []int
		if err := json.Unmarshal(b, &ids); err != nil {
			return err
		}
		*t = ids
		return nil
	}
	var id int
	if err := json.Unmarshal(b, &id); err != nil {
		return err
	}
	*t = TokenIDs{id}
	return nil
}

// ParseConfig parses config.json bytes, in any spelling Normalize reads.
func ParseConfig(b []byte) (Config, error) {
	n, err := Normalize(b)
	if err != nil {
		return Config{}, err
	}
	var c Config
	if err := json.Unmarshal(PythonJSON(n.JSON), &c); err != nil {
		return Config{}, fmt.Errorf("hf: config.json: %w", err)
	}
	return c, nil
}

// KVHeads is num_key_value_heads, defaulting to num_attention_heads.
func (c Config) KVHeads() int {
	if c.NumKeyValueHeads == 0 {
		return c.NumAttentionHeads
	}
	return c.NumKeyValueHeads
}

// HeadDimension is head_dim, defaulting to hidden_size/num_attention_heads.
func (c Config) HeadDimension() int {
	if c.HeadDim != 0 || c.NumAttentionHeads == 0 {
		return c.HeadDim
	}
	return c.HiddenSize / c.NumAttentionHeads
}

// Validate checks the fields a Llama-family forward pass depends on and
// names the first bad one.
func (c Config) Validate() error {
	var errs []error
	positive := []struct {
		name string
		v    int
	}{
		{"hidden_size", c.HiddenSize}, {"num_hidden_layers", c.NumHiddenLayers},
		{"num_attention_heads", c.NumAttentionHeads}, {"intermediate_size", c.IntermediateSize},
		{"vocab_size", c.VocabSize},
	}
	for _, p := range positive {
		if p.v <= 0 {
			errs = append(errs, fmt.Errorf("%s is %d, must be positive", p.name, p.v))
		}
	}
	if c.NumKeyValueHeads < 0 || c.HeadDim < 0 || c.MaxPositionEmbeddings < 0 {
		errs = append(errs, fmt.Errorf("num_key_value_heads %d, head_dim %d and max_position_embeddings %d must not be negative",
			c.NumKeyValueHeads, c.HeadDim, c.MaxPositionEmbeddings))
	}
	if kv := c.KVHeads(); c.NumAttentionHeads > 0 && kv > 0 && c.NumAttentionHeads%kv != 0 {
		errs = append(errs, fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumAttentionHeads, kv))
	}
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 && c.HiddenSize%c.NumAttentionHeads != 0 {
		errs = append(errs, fmt.Errorf("hidden_size %d is not a multiple of num_attention_heads %d and head_dim is absent", c.HiddenSize, c.NumAttentionHeads))
	}
	if c.RMSNormEps < 0 || c.RopeTheta < 0 {
		errs = append(errs, fmt.Errorf("rms_norm_eps %g and rope_theta %g must not be negative", c.RMSNormEps, c.RopeTheta))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("hf: config.json: %w", err)
	}
	return nil
}

// PythonJSON quotes the bare Infinity, -Infinity and NaN tokens Python's json
// module writes outside strings (transformers saves config.json with it,
// so a time_step_limit of (0, inf) reads [0.0, Infinity]), so
// encoding/json can parse the file; the strings are left to the fields'
// own parsers.
func PythonJSON(b []byte) []byte {
	if !bytes.Contains(b, []byte("Infinity")) && !bytes.Contains(b, []byte("NaN")) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	inStr, esc := false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inStr {
			out = append(out, c)
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		if c == '"' {
			inStr = true
			out = append(out, c)
			continue
		}
		for _, tok := range []string{"-Infinity", "Infinity", "NaN"} {
			if bytes.HasPrefix(b[i:], []byte(tok)) {
				out = append(out, '"')
				out = append(out, tok...)
				out = append(out, '"')
				i += len(tok) - 1
				c = 0
				break
			}
		}
		if c != 0 {
			out = append(out, c)
		}
	}
	return out
}
