package cpu

import (
	"fmt"
	"math"
)

// RopeStyle selects which dimensions of a head rotate together.
type RopeStyle uint8

const (
	// RopeNormal rotates adjacent pairs (x[2i], x[2i+1]): GGUF llama, and
	// DeepSeek-V2/V3's rope part (HF de-interleaves it before rotate_half,
	// which is the same rotation).
	RopeNormal RopeStyle = iota
	// RopeNeox rotates (x[i], x[i+rotDim/2]): HF rotate_half, GGUF qwen2/qwen3,
	// gemma, gpt-oss.
	RopeNeox
)

// Rope applies rotary position embeddings. It is immutable after NewRope and
// safe for concurrent use.
type Rope struct {
	headDim, rotDim int
	offset          int // first rotated element of each head (WithOffset)
	style           RopeStyle
	invFreq         []float64 // rotDim/2 angular frequencies (radians per position)
	// attnFactor multiplies cos and sin (YaRN's attention factor, the
	// "mscale" HF and DeepSeek fold into the table); 1 for every other rule.
	attnFactor float64
}

// NewRope precomputes inverse frequencies theta^(-2i/rotDim) in float64 and
// applies the scaling (rope_scaling.go). Only rotDim dims of each head
// rotate: the first ones, or those from WithOffset's offset on.
func NewRope(headDim, rotDim int, theta float64, s RopeScaling, style RopeStyle) (*Rope, error) {
	if headDim <= 0 || rotDim <= 0 || rotDim > headDim || rotDim%2 != 0 {
		return nil, fmt.Errorf("cpu: rope head dim %d, rotary dim %d: rotary dim must be even and in (0, head dim]: %w", headDim, rotDim, ErrShape)
	}
	if !(theta > 0) || math.IsInf(theta, 0) {
		return nil, fmt.Errorf("cpu: rope theta %v must be positive and finite", theta)
	}
	if style != RopeNormal && style != RopeNeox {
		return nil, fmt.Errorf("cpu: unknown rope style %d", style)
	}
	inv := make([]float64, rotDim/2)
	for i := range inv {
		inv[i] = math.Pow(theta, -float64(2*i)/float64(rotDim))
	}
	af, err := s.apply(inv, theta, rotDim)
	if err != nil {
		return nil, err
	}
	return &Rope{headDim: headDim, rotDim: rotDim, style: style, invFreq: inv, attnFactor: af}, nil
}

// WithOffset returns a copy of r that rotates elements offset ..
// offset+rotDim-1 of each head instead of the first rotDim: DeepSeek's query
// heads keep the rope part after qk_nope_head_dim, and its shared rope key
// sits after the kv_lora_rank latent in each row of kv_a_proj's output (one
// "head" of kv_lora_rank+qk_rope_head_dim elements).
func (r *Rope) WithOffset(offset int) (*Rope, error) {
	if offset < 0 || offset+r.rotDim > r.headDim {
		return nil, fmt.Errorf("cpu: rope offset %d with rotary dim %d does not fit a head of %d: %w", offset, r.rotDim, r.headDim, ErrShape)
	}
	c := *r
	c.offset = offset
	return &c, nil
}

// InvFreq returns a copy of the scaled angular frequencies (rotDim/2 values).
func (r *Rope) InvFreq() []float64 { return append([]float64(nil), r.invFreq...) }

// AttnFactor is the factor cos and sin are multiplied by (1 except for YaRN).
func (r *Rope) AttnFactor() float64 { return r.attnFactor }

// Offset is the first rotated element of each head.
func (r *Rope) Offset() int { return r.offset }

// ropeRun is how many rows of consecutive positions Apply turns the angles
// of by one position's rotation before it computes them afresh: the
// recurrence's float64 error over a run (about ropeRun ulps) stays far
// below float32's, and a prefill chunk computes one sine and cosine per
// frequency every ropeRun rows instead of on every row.
const ropeRun = 32

// ropeMaxPairs bounds the frequencies Apply keeps on its stack; wider
// rotations (rotDim > 2·ropeMaxPairs) compute every row's angles afresh.
const ropeMaxPairs = 256

// Apply rotates x in place; x is laid out [n, nHeads*headDim] and row i is at
// position positions[i]. Angles are float64 and shared by all heads: computed
// with math.Sincos at a run's first row and turned by one position's
// rotation for each next row of consecutive positions (up to ropeRun rows),
// so nothing is allocated or cached.
func (r *Rope) Apply(x []float32, n, nHeads int, positions []int32) {
	hd := r.headDim
	width := nHeads * hd
	if len(x) < n*width || len(positions) < n {
		panic(fmt.Sprintf("cpu: rope apply n=%d heads=%d head dim=%d: x has %d floats, positions %d", n, nHeads, hd, len(x), len(positions)))
	}
	half := r.rotDim / 2
	var sn, cs, s1, c1 [ropeMaxPairs]float64
	turned, since := false, ropeRun // s1/c1 hold one position's rotation; rows since the last fresh angles
	for i := range n {
		row := x[i*width : (i+1)*width]
		pos := positions[i]
		switch {
		case half > ropeMaxPairs:
			r.rotateRow(row, width, pos)
			continue
		case i > 0 && pos == positions[i-1]+1 && since < ropeRun:
			if !turned {
				for j, f := range r.invFreq {
					s1[j], c1[j] = math.Sincos(f)
				}
				turned = true
			}
			for j := range half {
				s, c := sn[j], cs[j]
				sn[j], cs[j] = s*c1[j]+c*s1[j], c*c1[j]-s*s1[j]
			}
			since++
		default:
			for j, f := range r.invFreq {
				sn[j], cs[j] = math.Sincos(float64(pos) * f)
			}
			since = 1
		}
		for j := range half {
			r.rotatePair(row, width, j, float32(sn[j]*r.attnFactor), float32(cs[j]*r.attnFactor))
		}
	}
}

// rotateRow rotates one row at position pos, every angle from math.Sincos.
func (r *Rope) rotateRow(row []float32, width int, pos int32) {
	for j, f := range r.invFreq {
		s64, c64 := math.Sincos(float64(pos) * f)
		r.rotatePair(row, width, j, float32(s64*r.attnFactor), float32(c64*r.attnFactor))
	}
}

// rotatePair rotates frequency j's pair of elements in every head of row by
// the angle whose sine and cosine are s and c.
func (r *Rope) rotatePair(row []float32, width, j int, s, c float32) {
	a, b := r.offset+2*j, r.offset+2*j+1
	if r.style == RopeNeox {
		a, b = r.offset+j, r.offset+j+r.rotDim/2
	}
	for h := 0; h < width; h += r.headDim {
		x0, x1 := row[h+a], row[h+b]
		row[h+a] = x0*c - x1*s
		row[h+b] = x0*s + x1*c
	}
}
