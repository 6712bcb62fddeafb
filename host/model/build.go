package model

import (
	"fmt"
	"reflect"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
)

// Builder is what an architecture's Layers function loads a model
// through: weights by canonical (GGUF) name with the shape it expects,
// prepared ropes, and the attention shapes the shared workspace must
// serve. The same Layers code runs for a real load (weights uploaded or
// mapped) and for plan's dry run (NewDry: shapes only, no memory), so what
// plan predicts is what loading does.
type Builder struct {
	// C is the configuration being loaded.
	C Config

	m      *Model
	u      *uploader // nil in a dry build
	ropes  []device.Rope
	shapes []device.AttnShape
	next   device.Ptr // a dry build's weight addresses
	// Tensors lists every weight asked for, in order.
	tensors []TensorShape
}

// TensorShape is one weight a model loads: its canonical name and shape
// (Rows 1 for a vector, which the loader stores as F32).
type TensorShape struct {
	Name       string
	Rows, Cols int
	Vector     bool
}

// Kernels is the device's kernel set (for optional capabilities a part
// will need: an architecture refuses to load on a device that lacks them).
func (b *Builder) Kernels() device.Kernels { return b.m.k }

// Matrix loads the [rows, cols] matrix name (cols is the row length), as
// stored (quantized types stay quantized).
func (b *Builder) Matrix(name string, rows, cols int) (device.Weight, error) {
	b.tensors = append(b.tensors, TensorShape{Name: name, Rows: rows, Cols: cols})
	if b.u == nil {
		return b.dryWeight(rows, cols), nil
	}
	return b.u.matrix(name, rows, cols, true)
}

// Vector loads the n-value vector name, converted to F32.
func (b *Builder) Vector(name string, n int) (device.Weight, error) {
	b.tensors = append(b.tensors, TensorShape{Name: name, Rows: 1, Cols: n, Vector: true})
	if b.u == nil {
		return b.dryWeight(1, n), nil
	}
	return b.u.vector(name, n, true)
}

// Stacked loads n matrices of [rows, cols] stored as one tensor (GGUF dims
// {cols, rows, n}, as llama.cpp writes a layer's experts, e.g.
// ffn_gate_exps) as one weight of n·rows rows: matrix e is rows e·rows …,
// what device.Experts.ExpertMatMul reads.
func (b *Builder) Stacked(name string, n, rows, cols int) (device.Weight, error) {
	b.tensors = append(b.tensors, TensorShape{Name: name, Rows: n * rows, Cols: cols})
	if b.u == nil {
		return b.dryWeight(n*rows, cols), nil
	}
	return b.u.shaped(name, []int{cols, rows, n}, n*rows, cols, true)
}

// Trunk are an architecture's transforms outside its layers; zero fields
// are off. They need the device's Elementwise kernels.
type Trunk struct {
	// EmbedScale multiplies the embedded rows (Gemma: √hidden, Granite:
	// embedding_multiplier).
	EmbedScale float32
	// LogitScale multiplies the logits (Granite: 1/logits_scaling).
	LogitScale float32
	// LogitSoftCap > 0 soft-caps the logits after LogitScale: cap·tanh(l/cap)
	// (Gemma 2's final_logit_softcapping).
	LogitSoftCap float32
}

// SetTrunk sets the model's trunk transforms, refusing a device without
// the Elementwise kernels they run on.
func (b *Builder) SetTrunk(t Trunk) error {
	if t == (Trunk{}) {
		return nil
	}
	ew, ok := b.m.k.(device.Elementwise)
	if !ok {
		return fmt.Errorf("model: %s needs embedding or logit scaling, which device %s lacks (device.Elementwise)", b.C.Arch, b.m.dev.Info().Name)
	}
	if t.LogitSoftCap < 0 {
		return fmt.Errorf("model: final logit soft cap %v must not be negative", t.LogitSoftCap)
	}
	b.m.trunk, b.m.ew = t, ew
	return nil
}

// dryWeight is a weight with an address and a shape but no memory.
func (b *Builder) dryWeight(rows, cols int) device.Weight {
	b.next += 4096
	return device.Weight{Ptr: b.next, Type: device.F32, Rows: rows, Cols: cols, Bytes: int64(rows) * int64(cols) * 4}
}

// Rope prepares a rotary embedding; layers asking for equal specs share
// one.
func (b *Builder) Rope(spec device.RopeSpec) (device.Rope, error) {
	for _, r := range b.ropes {
		if reflect.DeepEqual(r.Spec(), spec) {
			return r, nil
		}
	}
	r, err := b.m.k.NewRope(spec)
	if err != nil {
		return nil, fmt.Errorf("model: rope: %w", err)
	}
	b.ropes = append(b.ropes, r)
	return r, nil
}

// AttnShape declares a shape some layer's attention runs at: the shared
// workspace (Step.AttnScratch) is sized for the largest.
func (b *Builder) AttnShape(s device.AttnShape) {
	for _, have := range b.shapes {
		if have == s {
			return
		}
	}
	b.shapes = append(b.shapes, s)
}

// build loads the embedding, the output norm and head, then the
// architecture's layers, then sizes the attention workspace. On error
// everything uploaded so far is freed.
func (m *Model) build(src tensorSource, o Options) (err error) {
	m.dev, m.k, m.act, m.weights = o.Device, o.Device.Kernels(), o.Activations, o.Weights
	b := &Builder{C: m.Config, m: m}
	if src != nil {
		b.u = &uploader{m: m, src: src, o: o, total: src.progressTotal()}
	}
	defer func() {
		if err != nil {
			_ = m.Close()
		}
	}()
	a, err := m.Config.arch()
	if err != nil {
		return err
	}
	c := m.Config
	if m.tokEmbd, err = b.Matrix("token_embd.weight", c.Vocab, c.Hidden); err != nil {
		return err
	}
	if m.outNorm, err = b.Vector("output_norm.weight", c.Hidden); err != nil {
		return err
	}
	if c.Tied {
		m.output = m.tokEmbd
	} else if m.output, err = b.Matrix("output.weight", c.Vocab, c.Hidden); err != nil {
		return err
	}
	if m.layers, err = a.Layers(b); err != nil {
		return err
	}
	if len(m.layers) != c.Layers {
		return fmt.Errorf("model: architecture %s built %d layers, the configuration has %d", a.Name, len(m.layers), c.Layers)
	}
	m.tensors = b.tensors
	m.ws = o.Workspaces
	if m.ws == nil {
		m.ws = alloc.NewWorkspaces(o.Activations)
	}
	floats := 0
	for _, s := range b.shapes {
		floats = max(floats, m.k.AttentionScratch(s))
	}
	if floats == 0 {
		return nil
	}
	p, err := m.ws.Get("attention.scratch", int64(floats)*4)
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	m.attnScratch = device.Buf{Ptr: p, N: floats}
	return nil
}

// Tensors lists every weight the model loaded, in load order, with the
// shape its architecture asked for.
func (m *Model) Tensors() []TensorShape { return m.tensors }
