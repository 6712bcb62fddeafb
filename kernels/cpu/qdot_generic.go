package cpu

import "encoding/binary"

// Portable integer dot products of one quantized weight row with one
// quantized activation row (qact.go), following GGML's generic vec_dot
// kernels: integer sums per block (exact in int32 for every format), then
// the float scales once per block. They are the fallback where no SIMD
// kernel runs and the reference the assembly is tested against.

// vecDotGo dots a weight row of type t (whole blocks) with its activation
// row xq (actRowBytes bytes).
func vecDotGo(t DType, w []byte, xq []byte) float32 {
	if actK(t) {
		x := asQ8K(xq)
		switch t {
		case Q2_K:
			return dotQ2KGo(w, x)
		case Q3_K:
			return dotQ3KGo(w, x)
		case Q4_K, Q5_K:
			return dotQ45KGo(t, w, x)
		case Q6_K:
			return dotQ6KGo(w, x)
		default:
			return dotIQ4XSGo(w, x)
		}
	}
	return dot32Go(t, w, asQ8(xq))
}

// dot32Go covers the 32-value formats: per block an integer Σ q·xq over the
// stored codes (signed, offset or looked up), then d_w·d_x·Σ, plus m·s for
// the formats with a minimum.
func dot32Go(t DType, w []byte, x []q8Block) float32 {
	bb := t.BlockBytes()
	var sum float32
	for i := range x {
		blk, xb := w[bb*i:bb*(i+1)], &x[i]
		var s int32
		switch t {
		case Q8_0:
			for j, q := range blk[2:34] {
				s += int32(int8(q)) * int32(xb.q[j])
			}
		case Q4_0, Q4_1:
			off := int32(8)
			qs := blk[2:18]
			if t == Q4_1 {
				off, qs = 0, blk[4:20]
			}
			for j, q := range qs {
				s += (int32(q&0xf)-off)*int32(xb.q[j]) + (int32(q>>4)-off)*int32(xb.q[j+16])
			}
		case Q5_0, Q5_1:
			off, qh, qs := int32(16), binary.LittleEndian.Uint32(blk[2:]), blk[6:22]
			if t == Q5_1 {
				off, qh, qs = 0, binary.LittleEndian.Uint32(blk[4:]), blk[8:24]
			}
			for j, q := range qs {
				s += (int32(q&0xf|fifth(qh, j))-off)*int32(xb.q[j]) + (int32(q>>4|fifth(qh, j+16))-off)*int32(xb.q[j+16])
			}
		case IQ4_NL:
			for j, q := range blk[2:18] {
				s += int32(kvaluesIQ4NL[q&0xf])*int32(xb.q[j]) + int32(kvaluesIQ4NL[q>>4])*int32(xb.q[j+16])
			}
		case MXFP4: // doubled E2M1 codes, the halved E8M0 scale
			for j, q := range blk[1:17] {
				s += int32(kvaluesMXFP4[q&0xf])*int32(xb.q[j]) + int32(kvaluesMXFP4[q>>4])*int32(xb.q[j+16])
			}
			sum += float32(s) * (e8m0Half[blk[0]] * xb.d)
			continue
		}
		sum += float32(s) * (half(blk) * xb.d)
		if t == Q4_1 || t == Q5_1 {
			sum += half(blk[2:]) * xb.s
		}
	}
	return sum
}

func dotQ2KGo(w []byte, x []q8KBlock) float32 {
	var sum float32
	for i := range x {
		blk, xb := w[84*i:84*(i+1)], &x[i]
		sc, qs := blk[0:16], blk[16:80]
		var summs, isum int32
		for j := range 16 {
			summs += int32(xb.bsums[j]) * int32(sc[j]>>4)
		}
		for n := range 2 {
			for j := range 4 {
				for h := range 2 {
					var s int32
					for l := range 16 {
						s += int32(xb.q[128*n+32*j+16*h+l]) * int32(qs[32*n+16*h+l]>>(2*j)&3)
					}
					isum += int32(sc[8*n+2*j+h]&0xf) * s
				}
			}
		}
		sum += xb.d*half(blk[80:])*float32(isum) - xb.d*half(blk[82:])*float32(summs)
	}
	return sum
}

func dotQ3KGo(w []byte, x []q8KBlock) float32 {
	var sum float32
	var sc [16]int8
	for i := range x {
		blk, xb := w[110*i:110*(i+1)], &x[i]
		hm, qs := blk[0:32], blk[32:96]
		q3kScales(blk[96:108], &sc)
		var isum int32
		for n := range 2 {
			for j := range 4 {
				m := byte(1) << (4*n + j)
				for h := range 2 {
					var s int32
					for l := range 16 {
						v := int32(qs[32*n+16*h+l] >> (2 * j) & 3)
						if hm[16*h+l]&m == 0 {
							v -= 4
						}
						s += v * int32(xb.q[128*n+32*j+16*h+l])
					}
					isum += int32(sc[8*n+2*j+h]) * s
				}
			}
		}
		sum += xb.d * half(blk[108:]) * float32(isum)
	}
	return sum
}

func dotQ45KGo(t DType, w []byte, x []q8KBlock) float32 {
	bb := t.BlockBytes()
	var sum float32
	for i := range x {
		blk, xb := w[bb*i:bb*(i+1)], &x[i]
		scales := blk[4:16]
		qs, qh := blk[16:144], []byte(nil)
		if t == Q5_K {
			qh, qs = blk[16:48], blk[48:176]
		}
		var isum, summs int32
		for j := range 4 {
			for h := range 2 {
				sc, m := scaleMinK4(2*j+h, scales)
				summs += int32(m) * (int32(xb.bsums[4*j+2*h]) + int32(xb.bsums[4*j+2*h+1]))
				var s int32
				for l := range 32 {
					q := qs[32*j+l] >> (4 * h) & 0xf
					if qh != nil {
						q |= (qh[l] >> (2*j + h) & 1) << 4
					}
					s += int32(q) * int32(xb.q[64*j+32*h+l])
				}
				isum += int32(sc) * s
			}
		}
		sum += xb.d*half(blk)*float32(isum) - xb.d*half(blk[2:])*float32(summs)
	}
	return sum
}

func dotQ6KGo(w []byte, x []q8KBlock) float32 {
	var sum float32
	for i := range x {
		blk, xb := w[210*i:210*(i+1)], &x[i]
		ql, qh, sc := blk[0:128], blk[128:192], blk[192:208]
		var isum int32
		for n := range 2 {
			for k := range 4 { // value groups l + 32k of this half
				for h := range 2 {
					var s int32
					for l := 16 * h; l < 16*h+16; l++ {
						lo := ql[64*n+32*(k&1)+l] >> (4 * (k >> 1)) & 0xf
						hi := qh[32*n+l] >> (2 * k) & 3
						s += (int32(lo|hi<<4) - 32) * int32(xb.q[128*n+32*k+l])
					}
					isum += int32(int8(sc[8*n+2*k+h])) * s
				}
			}
		}
		sum += xb.d * half(blk[208:]) * float32(isum)
	}
	return sum
}

func dotIQ4XSGo(w []byte, x []q8KBlock) float32 {
	var sum float32
	for i := range x {
		blk, xb := w[136*i:136*(i+1)], &x[i]
		qs := blk[8:136]
		var isum int32
		for ib := range 8 {
			var s int32
			q := qs[16*ib:]
			for j := range 16 {
				s += int32(kvaluesIQ4NL[q[j]&0xf])*int32(xb.q[32*ib+j]) + int32(kvaluesIQ4NL[q[j]>>4])*int32(xb.q[32*ib+j+16])
			}
			isum += int32(iq4xsScale(blk, ib)) * s
		}
		sum += xb.d * half(blk) * float32(isum)
	}
	return sum
}
