package model

import (
	"fmt"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/kv"
)

// Config is an architecture's hyper-parameters, whatever file they came from.
type Config struct {
	Arch         string          `json:"arch"` // llama, mistral, qwen2, qwen3
	Hidden       int             `json:"hidden_size"`
	Layers       int             `json:"num_layers"`
	Heads        int             `json:"num_heads"`
	KVHeads      int             `json:"num_kv_heads"`
	HeadDim      int             `json:"head_dim"`
	Intermediate int             `json:"intermediate_size"`
	Vocab        int             `json:"vocab_size"`
	ContextLen   int             `json:"context_length"`
	RMSEps       float32         `json:"rms_norm_eps"`
	Rope         device.RopeSpec `json:"rope"`
	QKVBias      bool            `json:"qkv_bias"`
	QKNorm       bool            `json:"qk_norm"`
	Tied         bool            `json:"tied_embeddings"`
	// Ext is the architecture's own parameters beyond these (a window
	// pattern, MLA ranks, experts, a Mamba layout), owned by its
	// arch_<name>.go; nil for the Llama family.
	Ext ArchParams `json:"ext,omitempty"`
}

// ArchParams is an architecture-owned sub-configuration (Config.Ext).
type ArchParams interface {
	// Validate names the first field that cannot describe a working
	// model of c's shape.
	Validate(c Config) error
}

// maxDim bounds every dimension so a lying header cannot request absurd
// buffers; the largest real models stay far below it.
const maxDim = 1 << 20

// Validate names the first field that cannot describe a working model.
func (c Config) Validate() error {
	checks := []struct {
		name string
		v    int
	}{
		{"hidden_size", c.Hidden}, {"num_layers", c.Layers}, {"num_heads", c.Heads},
		{"num_kv_heads", c.KVHeads}, {"head_dim", c.HeadDim}, {"intermediate_size", c.Intermediate},
		{"vocab_size", c.Vocab}, {"context_length", c.ContextLen},
	}
	for _, ch := range checks {
		if ch.v <= 0 || ch.v > maxDim*16 {
			return fmt.Errorf("model: %s = %d is out of range [1, %d]", ch.name, ch.v, maxDim*16)
		}
	}
	switch {
	case c.Layers > 1024:
		return fmt.Errorf("model: num_layers = %d is out of range [1, 1024]", c.Layers)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("model: num_heads %d is not a multiple of num_kv_heads %d", c.Heads, c.KVHeads)
	case noRope(c):
		// no rotary embedding to check (Nemotron-H, Granite-4.0-H)
	case c.HeadDim%2 != 0:
		return fmt.Errorf("model: head_dim %d must be even for rotary embeddings", c.HeadDim)
	case c.Rope.RotDim <= 0 || c.Rope.RotDim > c.HeadDim || c.Rope.RotDim%2 != 0:
		return fmt.Errorf("model: rope dimension %d must be even and in [2, head_dim %d]", c.Rope.RotDim, c.HeadDim)
	case !(c.Rope.Theta > 0):
		return fmt.Errorf("model: rope theta %v must be positive", c.Rope.Theta)
	case !(c.RMSEps > 0 && c.RMSEps < 1):
		return fmt.Errorf("model: rms_norm_eps %v out of range (0, 1)", c.RMSEps)
	}
	if c.Ext != nil {
		return c.Ext.Validate(c)
	}
	return nil
}

// noRope reports an architecture without rotary embeddings (its Ext says
// NoRope), whose Rope is unset and not checked.
func noRope(c Config) bool {
	n, ok := c.Ext.(interface{ NoRope() bool })
	return ok && n.NoRope()
}

// KVRow is the number of floats one token occupies in one layer's K (or V).
func (c Config) KVRow() int { return c.KVHeads * c.HeadDim }

// AttnShape is the attention shape the kernels size their scratch by.
func (c Config) AttnShape() device.AttnShape {
	return device.AttnShape{Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim, VHeadDim: c.HeadDim}
}

// QRow is the width of the query projection.
func (c Config) QRow() int { return c.Heads * c.HeadDim }

// KVNeeds is what each layer keeps between forwards (Arch.KVNeeds), the
// need a configurator's declaration must meet (kv.NewLayout). A Config of
// no registered architecture (built by hand in a test) is read as the
// Llama family.
func (c Config) KVNeeds() []kv.LayerNeed {
	if a, err := c.arch(); err == nil {
		return a.KVNeeds(c)
	}
	return llamaKVNeeds(c)
}

// Params counts the parameters the architecture implies (Arch.Params); a
// Config of no registered architecture is read as the Llama family.
func (c Config) Params() int64 {
	if a, err := c.arch(); err == nil {
		return a.Params(c)
	}
	return llamaParams(c)
}
