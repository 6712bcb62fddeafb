package sampling

import (
	"math"
	"math/bits"
	"slices"
)

// ApplyMask is how an output constraint reaches sampling: every logit of
// row whose id has no bit in mask (bit id%32 of word id/32), and every id
// in deny, becomes -Inf. The engine applies it to the row before anything
// else reads it, so the pre-ops, the cut to K candidates and every policy
// see only allowed tokens, and greedy is an argmax over them. It returns
// how many ids stay allowed; ids past the mask are refused.
func ApplyMask(row []float32, mask []uint32, deny []int32) int {
	negInf := float32(math.Inf(-1))
	allowed := 0
	for w := 0; w*32 < len(row); w++ {
		base := w * 32
		end := min(base+32, len(row))
		var m uint32
		if w < len(mask) {
			m = mask[w]
		}
		if end-base < 32 {
			m &= 1<<(end-base) - 1
		}
		switch m {
		case 0:
			seg := row[base:end]
			for i := range seg {
				seg[i] = negInf
			}
		case math.MaxUint32:
			allowed += 32
		default:
			allowed += bits.OnesCount32(m)
			z := ^m
			if end-base < 32 {
				z &= 1<<(end-base) - 1
			}
			for ; z != 0; z &= z - 1 {
				row[base+bits.TrailingZeros32(z)] = negInf
			}
		}
	}
	for k, id := range deny {
		if slices.Contains(deny[:k], id) {
			continue
		}
		if id >= 0 && int(id) < len(row) && int(id>>5) < len(mask) && mask[id>>5]&(1<<(id&31)) != 0 {
			row[id] = negInf
			allowed--
		}
	}
	return allowed
}
