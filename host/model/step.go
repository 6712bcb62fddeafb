package model

import (
	"fmt"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/kv"
)

// scope tracks the activations of one forward so an error anywhere frees
// them all; it holds no Go-heap allocations of its own.
type scope struct {
	a    *alloc.Allocator
	cat  alloc.Category
	live [16]device.Ptr
	n    int
}

func (s *scope) buf(floats int) (device.Buf, error) {
	if floats <= 0 {
		floats = 1
	}
	p, err := s.a.Alloc(int64(floats)*4, s.cat)
	if err != nil {
		return device.Buf{}, err
	}
	if s.n == len(s.live) {
		_ = s.a.Free(p)
		return device.Buf{}, fmt.Errorf("model: more than %d live activations", len(s.live))
	}
	s.live[s.n] = p
	s.n++
	return device.Buf{Ptr: p, N: floats}, nil
}

func (s *scope) free(b device.Buf) {
	for i := s.n - 1; i >= 0; i-- {
		if s.live[i] == b.Ptr {
			_ = s.a.Free(b.Ptr)
			s.n--
			s.live[i] = s.live[s.n]
			return
		}
	}
}

func (s *scope) release() {
	for i := 0; i < s.n; i++ {
		_ = s.a.Free(s.live[i])
	}
	s.n = 0
}

// Step is what a layer's parts see of one forward: its rows and their
// positions, the activation scope, the caches, and whether it is an eager
// forward over whole sequences (Seqs) or a captured decode step of one row
// per sequence (Decode). The model owns one Step and reuses it, so a warm
// forward allocates nothing on the Go heap.
//
// The parts write one forward for both modes: Buf/Free for temporaries,
// Attend for the paged attention of the current layer, Seqs/Tables/Slots
// for per-sequence state. Everything a captured step reads per replay
// (positions, tables, slots) is a host slice whose contents the graph
// runner rewrites; never copy it into a value at capture time.
type Step struct {
	// K is the device's kernel set; optional capabilities are found on it
	// by type assertion (device.Elementwise, device.Experts, device.Mamba).
	K device.Kernels
	// C is the model's configuration.
	C *Config
	// Layer is the index of the layer running.
	Layer int
	// Rows is the number of token rows; Positions their positions.
	Rows      int
	Positions []int32
	// Pools are the caches: Pools.Layer(Layer), Pools.Table(Layer),
	// Pools.State(Layer).
	Pools *kv.Set
	// Seqs are the sequences of an eager forward (nil in a decode step):
	// rows are theirs in order, len(Tokens) each.
	Seqs []Seq

	m       *Model
	dec     *decodeInputs // the captured step's inputs (nil: eager)
	sc      scope
	scratch device.Buf // the attention workspace
	// mmOut and mmW are matMuls' arguments: slices of the Step's own arrays
	// reach the device without a heap allocation.
	mmOut [device.MaxMatMuls]device.Buf
	mmW   [device.MaxMatMuls]device.Weight
}

// matMuls computes outs[i] = x·ws[i]ᵀ over the step's rows for each i (up to
// device.MaxMatMuls weights sharing x): in one device call where the device
// groups them (device.MatMuls), else one MatMul each. Results are the same
// either way.
func (s *Step) matMuls(x device.Buf, outs []device.Buf, ws []device.Weight) error {
	if g, ok := s.K.(device.MatMuls); ok && len(ws) > 1 {
		n := copy(s.mmOut[:], outs)
		copy(s.mmW[:], ws)
		return g.MatMuls(s.mmOut[:n], x, s.Rows, s.mmW[:n])
	}
	for i, w := range ws {
		if err := s.K.MatMul(outs[i], x, s.Rows, w); err != nil {
			return err
		}
	}
	return nil
}

// Decode reports whether this is a captured decode step: one row per
// sequence, per-row tables and slots in Tables and Slots.
func (s *Step) Decode() bool { return s.dec != nil }

// Buf takes an activation of floats from the caching allocator; it lives
// until Free or the forward's end. Every part must Free what it takes
// before it returns (spec §4: a layer's temporaries die with the layer).
func (s *Step) Buf(floats int) (device.Buf, error) { return s.sc.buf(floats) }

// Free returns an activation taken with Buf.
func (s *Step) Free(b device.Buf) { s.sc.free(b) }

// AttnScratch is the shared attention workspace (sized at load for every
// layer's AttnShape, Builder.AttnShape).
func (s *Step) AttnScratch() device.Buf { return s.scratch }

// Tables are the decode step's page tables of token pool p, one per row.
func (s *Step) Tables(p int) [][]int32 { return s.dec.tables[p][:s.Rows] }

// Slots are the decode step's state slots of state pool p, one per row.
func (s *Step) Slots(p int) []int32 { return s.dec.slots[p][:s.Rows] }

// Attend stores the rows' keys k and values v in the current layer's cache
// and runs attention of q over it into out, for every sequence (eager) or
// every row (decode). Row widths are the buffers' (N/Rows): q and out hold
// heads query rows of the layer's HeadDim and VHeadDim, k and v its KV
// rows (v is ignored on a latent layer).
func (s *Step) Attend(out, q, k, v device.Buf, heads int, o device.AttnOpts) error {
	kvl, tp := s.Pools.Layer(s.Layer), s.Pools.Table(s.Layer)
	if tp < 0 {
		return fmt.Errorf("model: layer %d attends but keeps no cache in the declared pools", s.Layer)
	}
	if s.dec != nil {
		dk, ok := s.K.(device.DecodeKernels)
		if !ok {
			return ErrNoCapture
		}
		tables := s.dec.tables[tp][:s.Rows]
		if err := dk.WriteKVRows(kvl, k, v, s.Positions, tables); err != nil {
			return err
		}
		return dk.DecodeAttention(out, q, heads, kvl, s.Positions, tables, o, s.scratch, s.C.ContextLen)
	}
	qr, kr, vr, or := q.N/s.Rows, k.N/s.Rows, v.N/s.Rows, out.N/s.Rows
	off := 0
	for _, sq := range s.Seqs {
		n := len(sq.Tokens)
		if err := s.K.WriteKV(kvl, k.Slice(off*kr, n*kr), v.Slice(off*vr, n*vr), n, sq.Pages[tp], sq.Start); err != nil {
			return err
		}
		if err := s.K.Attention(out.Slice(off*or, n*or), q.Slice(off*qr, n*qr), n, heads, kvl, sq.Pages[tp], sq.Start, o, s.scratch); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// StateBatch is the batch a recurrent mixer (device.MambaBatch) runs over
// state pool p: starts[q]..starts[q+1] are sequence q's rows and slots[q]
// its slot. Eager, one entry per sequence (Seq.Slots[p]); decode, one row
// per sequence with the replay's slots (Slots(p)). The slices are the
// model's, reused by every forward (and, decoding, fixed for the captured
// graph): pass them to kernels, never keep them.
func (s *Step) StateBatch(p int) (starts, slots []int32) {
	if s.dec != nil {
		return s.dec.starts[:s.Rows+1], s.dec.slots[p][:s.Rows]
	}
	m := s.m
	m.starts = append(m.starts[:0], 0)
	for len(m.stateSlots) <= p {
		m.stateSlots = append(m.stateSlots, nil)
	}
	slots = m.stateSlots[p][:0]
	off := int32(0)
	for _, sq := range s.Seqs {
		off += int32(len(sq.Tokens))
		m.starts = append(m.starts, off)
		slots = append(slots, sq.Slots[p])
	}
	m.stateSlots[p] = slots
	return m.starts, slots
}
