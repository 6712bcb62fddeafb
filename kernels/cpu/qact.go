package cpu

import (
	"math"
	"unsafe"
)

// quantQ8Vec and quantQ8KVec run the AVX2 quantizers (qact_amd64.s) over
// all of dst and report whether they did (false without SIMD).

// Activations for the quantized matmul. A quantized weight row is dotted
// with an 8-bit copy of the activation row, made once per MatMul call as
// llama.cpp does: 32-value blocks (q8Block, GGML's block_q8_1 with float
// fields) for the legacy formats and IQ4_NL, 256-value blocks (q8KBlock,
// GGML's block_q8_K) for the K-quants and IQ4_XS. The dot products then run
// on integers and apply the float scales once per block.

// q8Block: x ≈ d·q over 32 values; s = d·Σq (what the minimum of Q4_1/Q5_1
// and the offset of Q4_0/Q5_0 multiply).
type q8Block struct {
	d, s float32
	q    [32]int8
}

// q8KBlock: x ≈ d·q over 256 values; bsums[i] = Σ q over values 16i..16i+15
// (what the K-quants' minimums and offsets multiply).
type q8KBlock struct {
	d     float32
	bsums [16]int16
	q     [QKK]int8
}

const (
	q8BlockBytes  = int(unsafe.Sizeof(q8Block{}))
	q8KBlockBytes = int(unsafe.Sizeof(q8KBlock{}))
)

// actK reports whether t's dot products take q8KBlock activations (else
// q8Block).
func actK(t DType) bool { return t.BlockSize() == QKK }

// actBlockBytes is the size of one quantized activation block for weights
// of type t.
func actBlockBytes(t DType) int {
	if actK(t) {
		return q8KBlockBytes
	}
	return q8BlockBytes
}

// actRowBytes is the size of one quantized activation row of cols values
// for weights of type t.
func actRowBytes(t DType, cols int) int {
	if actK(t) {
		return cols / QKK * q8KBlockBytes
	}
	return cols / 32 * q8BlockBytes
}

// asQ8 and asQ8K view quantized activation bytes (8-byte aligned, from
// actScratch) as blocks.
func asQ8(b []byte) []q8Block {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*q8Block)(unsafe.Pointer(&b[0])), len(b)/q8BlockBytes)
}

func asQ8K(b []byte) []q8KBlock {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*q8KBlock)(unsafe.Pointer(&b[0])), len(b)/q8KBlockBytes)
}

// actScratch returns n bytes of 8-byte aligned scratch from buf, growing it
// when too small (which only the first calls of a size do).
func actScratch(buf *[]uint64, n int) []byte {
	words := (n + 7) / 8
	if cap(*buf) < words {
		*buf = make([]uint64, words)
	}
	*buf = (*buf)[:words]
	if words == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&(*buf)[0])), n)
}

// quantizeAct quantizes m rows of cols values of x into dst (m rows of
// actRowBytes(t, cols)).
func quantizeAct(t DType, dst []byte, x []float32, m, cols int) {
	rb := actRowBytes(t, cols)
	for i := range m {
		row := x[i*cols : (i+1)*cols]
		if actK(t) {
			quantizeQ8K(asQ8K(dst[i*rb:(i+1)*rb]), row)
		} else {
			quantizeQ8(asQ8(dst[i*rb:(i+1)*rb]), row)
		}
	}
}

// quantizeQ8 is GGML's quantize_row_q8_1 with float32 fields and
// round-half-even codes: d = max|x|/127, q = round(x/d) (via id = 1/d),
// s = d·Σq. The AVX2 kernel computes exactly this.
func quantizeQ8(dst []q8Block, x []float32) {
	if quantQ8Vec(dst, x) {
		return
	}
	for b := range dst {
		xb := x[32*b : 32*b+32]
		var amax float32
		for _, v := range xb {
			amax = max(amax, abs32(v))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		var sum int32
		q := &dst[b].q
		for j, v := range xb {
			c := roundEven32(v * id)
			q[j] = int8(c)
			sum += c
		}
		dst[b].d, dst[b].s = d, d*float32(sum)
	}
}

// quantizeQ8K is GGML's quantize_row_q8_K: the value of largest magnitude
// (the maximum when it is at least −minimum, else the minimum) maps to
// −127: q = min(127, round-half-even(x·(−127/mx))), d = 1/iscale, bsums the
// sums of 16 codes. The AVX2 kernel computes exactly this.
func quantizeQ8K(dst []q8KBlock, x []float32) {
	if quantQ8KVec(dst, x) {
		return
	}
	for b := range dst {
		xb := x[QKK*b : QKK*b+QKK]
		blk := &dst[b]
		hi, lo := xb[0], xb[0]
		for _, v := range xb {
			hi, lo = max(hi, v), min(lo, v)
		}
		if max(hi, -lo) == 0 {
			*blk = q8KBlock{}
			continue
		}
		mx := hi
		if hi < -lo {
			mx = lo
		}
		iscale := -127 / mx
		for g := range 16 {
			var s int32
			for j := 16 * g; j < 16*g+16; j++ {
				c := min(127, roundEven32(iscale*xb[j]))
				blk.q[j] = int8(c)
				s += c
			}
			blk.bsums[g] = int16(s)
		}
		blk.d = 1 / iscale
	}
}

// roundEven32 rounds to the nearest integer, half to even, with float32
// arithmetic only (GGML's nearest_int: |v| < 2^22).
func roundEven32(v float32) int32 {
	return int32(math.Float32bits(v+12582912)&0x7fffff) - 0x400000
}
