package cpu

import (
	"encoding/binary"
	"math"
)

// K-quant and IQ4 weight quantizers (ggml-quants.c reference rules without
// an importance matrix). Each writes one super-block; blk is zeroed by the
// caller.

const groupMaxEps = 1e-15

// makeQxQuants fits x ≈ scale·(L − nmax) with L in [0, 2·nmax) (GGML's
// make_qx_quants with rmse_type 1 and weights x², no importance weights):
// the max-magnitude start, then 18 nearby inverse scales, keeping the best
// least-squares fit.
func makeQxQuants(nmax int, x []float32, L []int8) float32 {
	var mx, amax float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	if amax < groupMaxEps {
		clear(L)
		return 0
	}
	fn := float32(nmax)
	clamp := func(l int) int { return max(-nmax, min(nmax-1, l)) }
	iscale := -fn / mx
	var sumlx, suml2 float32
	for i, v := range x {
		l := clamp(nearestInt(iscale * v))
		L[i] = int8(l + nmax)
		w := v * v
		sumlx += w * v * float32(l)
		suml2 += w * float32(l) * float32(l)
	}
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(fn + 0.1*float32(is)) / mx
		sumlx, suml2 = 0, 0
		for _, v := range x {
			l := clamp(nearestInt(iscale * v))
			w := v * v
			sumlx += w * v * float32(l)
			suml2 += w * float32(l) * float32(l)
		}
		if suml2 > 0 && sumlx*sumlx > best*suml2 {
			for i, v := range x {
				L[i] = int8(nmax + clamp(nearestInt(iscale*v)))
			}
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}

// makeQ3Quants is GGML's make_q3_quants with do_rmse: start from the
// max-magnitude scale, then move single values while the weighted fit
// improves (up to five passes).
func makeQ3Quants(nmax int, x []float32, L []int8) float32 {
	var mx, amax float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	if amax < groupMaxEps {
		clear(L)
		return 0
	}
	clamp := func(l int) int { return max(-nmax, min(nmax-1, l)) }
	iscale := -float32(nmax) / mx
	var sumlx, suml2 float32
	for i, v := range x {
		l := clamp(nearestInt(iscale * v))
		L[i] = int8(l)
		w := v * v
		sumlx += w * v * float32(l)
		suml2 += w * float32(l) * float32(l)
	}
	for range 5 {
		changed := 0
		for i, v := range x {
			w := v * v
			slx := sumlx - w*v*float32(L[i])
			if slx > 0 {
				sl2 := suml2 - w*float32(L[i])*float32(L[i])
				nl := clamp(nearestInt(v * sl2 / slx))
				if nl != int(L[i]) {
					slx += w * v * float32(nl)
					sl2 += w * float32(nl) * float32(nl)
					if sl2 > 0 && slx*slx*suml2 > sumlx*sumlx*sl2 {
						L[i], sumlx, suml2 = int8(nl), slx, sl2
						changed++
					}
				}
			}
		}
		if changed == 0 {
			break
		}
	}
	for i := range L {
		L[i] += int8(nmax)
	}
	if suml2 > 0 {
		return sumlx / suml2
	}
	return 0
}

// makeQkx2Quants fits x ≈ scale·L − min with L in [0, nmax] and min ≥ 0
// (GGML's make_qkx2_quants): a min/max start, then nstep+1 trial inverse
// scales, each refined by weighted least squares; returns scale and min.
func makeQkx2Quants(nmax int, x, weights []float32, L, Laux []uint8, rmin, rdelta float32, nstep int, useMad bool) (float32, float32) {
	lo, hi := x[0], x[0]
	sumW := weights[0]
	sumX := sumW * x[0]
	for i := 1; i < len(x); i++ {
		lo, hi = min(lo, x[i]), max(hi, x[i])
		sumW += weights[i]
		sumX += weights[i] * x[i]
	}
	if lo > 0 {
		lo = 0
	}
	if hi == lo {
		clear(L)
		return 0, -lo
	}
	fn := float32(nmax)
	clamp := func(l int) uint8 { return uint8(max(0, min(nmax, l))) }
	errOf := func(d float32) float32 {
		if useMad {
			return abs32(d)
		}
		return d * d
	}
	iscale := fn / (hi - lo)
	scale := 1 / iscale
	var bestErr float32
	for i, v := range x {
		L[i] = clamp(nearestInt(iscale * (v - lo)))
		bestErr += weights[i] * errOf(scale*float32(L[i])+lo-v)
	}
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + rdelta*float32(is) + fn) / (hi - lo)
		var sumL, sumL2, sumXL float32
		for i, v := range x {
			l := clamp(nearestInt(iscale * (v - lo)))
			Laux[i] = l
			w := weights[i]
			sumL += w * float32(l)
			sumL2 += w * float32(l) * float32(l)
			sumXL += w * float32(l) * v
		}
		D := sumW*sumL2 - sumL*sumL
		if D > 0 {
			thisScale := (sumW*sumXL - sumX*sumL) / D
			thisMin := (sumL2*sumX - sumL*sumXL) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var cur float32
			for i, v := range x {
				cur += weights[i] * errOf(thisScale*float32(Laux[i])+thisMin-v)
			}
			if cur < bestErr {
				copy(L, Laux[:len(L)])
				bestErr, scale, lo = cur, thisScale, thisMin
			}
		}
	}
	return scale, -lo
}

// quantQ2K: per 16 values a (scale, min) fit with 2-bit levels, the sixteen
// scales and mins quantized to 4 bits against d and dmin, then the values
// re-quantized with the stored scales.
func quantQ2K(x []float32, blk []byte) {
	var L, Laux [QKK]uint8
	var weights [16]float32
	var scales, mins [16]float32
	var maxScale, maxMin float32
	for j := range 16 {
		xs := x[16*j : 16*j+16]
		for l, v := range xs {
			weights[l] = abs32(v)
		}
		scales[j], mins[j] = makeQkx2Quants(3, xs, weights[:], L[16*j:16*j+16], Laux[:16], -0.5, 0.1, 15, true)
		maxScale, maxMin = max(maxScale, scales[j]), max(maxMin, mins[j])
	}
	sc := blk[0:16]
	if maxScale > 0 {
		iscale := 15 / maxScale
		for j := range 16 {
			sc[j] = uint8(nearestInt(iscale * scales[j]))
		}
		putHalf(blk[80:], maxScale/15)
	}
	if maxMin > 0 {
		iscale := 15 / maxMin
		for j := range 16 {
			sc[j] |= uint8(nearestInt(iscale*mins[j])) << 4
		}
		putHalf(blk[82:], maxMin/15)
	}
	d, dmin := half(blk[80:]), half(blk[82:])
	for j := range 16 {
		dl := d * float32(sc[j]&0xf)
		if dl == 0 {
			continue
		}
		dm := dmin * float32(sc[j]>>4)
		for i := range 16 {
			L[16*j+i] = uint8(max(0, min(3, nearestInt((x[16*j+i]+dm)/dl))))
		}
	}
	packQ2(L[:], blk[16:80])
}

// packQ2 stores 256 2-bit values: for each 128, byte l holds values l,
// l+32, l+64, l+96 at bits 0, 2, 4, 6.
func packQ2(L []uint8, qs []byte) {
	for n := range 2 {
		for l := range 32 {
			b := 128*n + l
			qs[32*n+l] = L[b] | L[b+32]<<2 | L[b+64]<<4 | L[b+96]<<6
		}
	}
}

// quantQ3K: per 16 values a signed 3-bit fit, sixteen 6-bit scales against
// d, values re-quantized to [−4, 3] with the stored scales; the bit of 4 goes
// to hmask.
func quantQ3K(x []float32, blk []byte) {
	var L [QKK]int8
	var scales [16]float32
	var maxScale, amax float32
	for j := range 16 {
		scales[j] = makeQ3Quants(4, x[16*j:16*j+16], L[16*j:16*j+16])
		if a := abs32(scales[j]); a > amax {
			amax, maxScale = a, scales[j]
		}
	}
	sc := blk[96:108]
	if maxScale != 0 {
		iscale := -32 / maxScale
		for j := range 16 {
			l := uint8(max(-32, min(31, int(int8(nearestInt(iscale*scales[j]))))) + 32)
			if j < 8 {
				sc[j] = l & 0xf
			} else {
				sc[j-8] |= l & 0xf << 4
			}
			sc[8+j%4] |= l >> 4 << (2 * (j / 4))
		}
		putHalf(blk[108:], 1/iscale)
	}
	var s16 [16]int8
	q3kScales(sc, &s16)
	d := half(blk[108:])
	var U [QKK]uint8
	for j := range 16 {
		dl := d * float32(s16[j])
		if dl == 0 {
			for i := range 16 {
				U[16*j+i] = uint8(L[16*j+i])
			}
			continue
		}
		for i := range 16 {
			U[16*j+i] = uint8(max(-4, min(3, nearestInt(x[16*j+i]/dl))) + 4)
		}
	}
	hm := blk[0:32]
	for j := range QKK {
		if U[j] > 3 {
			hm[j%32] |= 1 << (j / 32)
			U[j] -= 4
		}
	}
	packQ2(U[:], blk[32:96])
}

// quantQ45K: per 32 values a (scale, min) fit with 4-bit (Q4_K) or 5-bit
// (Q5_K) levels, eight 6-bit scales and mins against d and dmin, values
// re-quantized with the stored pairs.
func quantQ45K(t DType, x []float32, blk []byte) {
	nmax, rmin, rdelta, nstep := 15, float32(-1), float32(0.1), 20
	if t == Q5_K {
		nmax, rmin, nstep = 31, -0.5, 15
	}
	var L [QKK]uint8
	var Laux [32]uint8
	var weights [32]float32
	var scales, mins [8]float32
	var maxScale, maxMin float32
	for j := range 8 {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += v * v
		}
		av := float32(math.Sqrt(float64(sumX2 / 32)))
		for l, v := range xs {
			weights[l] = av + abs32(v)
		}
		scales[j], mins[j] = makeQkx2Quants(nmax, xs, weights[:], L[32*j:32*j+32], Laux[:], rmin, rdelta, nstep, false)
		maxScale, maxMin = max(maxScale, scales[j]), max(maxMin, mins[j])
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	sc := blk[4:16]
	for j := range 8 {
		ls := min(63, uint8(nearestInt(invScale*scales[j])))
		lm := min(63, uint8(nearestInt(invMin*mins[j])))
		if j < 4 {
			sc[j], sc[j+4] = ls, lm
		} else {
			sc[j+4] = ls&0xf | lm&0xf<<4
			sc[j-4] |= ls >> 4 << 6
			sc[j] |= lm >> 4 << 6
		}
	}
	putHalf(blk, maxScale/63)
	putHalf(blk[2:], maxMin/63)
	d, dmin := half(blk), half(blk[2:])
	for j := range 8 {
		s, m := scaleMinK4(j, sc)
		dl := d * float32(s)
		if dl == 0 {
			continue
		}
		dm := dmin * float32(m)
		for i := range 32 {
			L[32*j+i] = uint8(max(0, min(nmax, nearestInt((x[32*j+i]+dm)/dl))))
		}
	}
	if t == Q4_K {
		qs := blk[16:144]
		for j := range 4 {
			for l := range 32 {
				qs[32*j+l] = L[64*j+l] | L[64*j+32+l]<<4
			}
		}
		return
	}
	qh, qs := blk[16:48], blk[48:176]
	for j := range 4 {
		for l := range 32 {
			a, b := L[64*j+l], L[64*j+32+l]
			if a > 15 {
				a -= 16
				qh[l] |= 1 << (2 * j)
			}
			if b > 15 {
				b -= 16
				qh[l] |= 2 << (2 * j)
			}
			qs[32*j+l] = a | b<<4
		}
	}
}

// quantQ6K: per 16 values a signed 6-bit fit, sixteen int8 scales against
// d, values re-quantized to [−32, 31] with the stored scales.
func quantQ6K(x []float32, blk []byte) {
	var L [QKK]int8
	var scales [16]float32
	var maxScale, maxAbs float32
	for ib := range 16 {
		scales[ib] = makeQxQuants(32, x[16*ib:16*ib+16], L[16*ib:16*ib+16])
		if a := abs32(scales[ib]); a > maxAbs {
			maxAbs, maxScale = a, scales[ib]
		}
	}
	if maxAbs < groupMaxEps {
		return // all zero (blk was cleared)
	}
	iscale := -128 / maxScale
	putHalf(blk[208:], 1/iscale)
	sc := blk[192:208]
	for ib := range 16 {
		sc[ib] = byte(int8(min(127, nearestInt(iscale*scales[ib]))))
	}
	d := half(blk[208:])
	for j := range 16 {
		dl := d * float32(int8(sc[j]))
		if dl == 0 {
			continue
		}
		for i := range 16 {
			L[16*j+i] = int8(max(-32, min(31, nearestInt(x[16*j+i]/dl))) + 32)
		}
	}
	ql, qh := blk[0:128], blk[128:192]
	for n := range 2 {
		for l := range 32 {
			b := 128*n + l
			q1, q2, q3, q4 := uint8(L[b]), uint8(L[b+32]), uint8(L[b+64]), uint8(L[b+96])
			ql[64*n+l] = q1&0xf | q3&0xf<<4
			ql[64*n+l+32] = q2&0xf | q4&0xf<<4
			qh[32*n+l] = q1>>4 | q2>>4<<2 | q3>>4<<4 | q4>>4<<6
		}
	}
}

// iq4Fit is GGML's quantize_row_iq4_nl_impl for one 32-value block with
// weights x² and ntry = 7 (what llama-quantize runs without an importance
// matrix): the scale that best fits the code book over 15 trial scales.
func iq4Fit(xb []float32) float32 {
	var amax, mx float32
	for _, v := range xb {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	if amax < groupMaxEps {
		return 0
	}
	const ntry = 7
	v0 := float32(kvaluesIQ4NL[0])
	d := -mx / v0
	id := 1 / d
	var sumqx, sumq2 float32
	for _, v := range xb {
		q := float32(kvaluesIQ4NL[bestIndexIQ4NL(id*v)])
		w := v * v
		sumqx += w * q * v
		sumq2 += w * q * q
	}
	d = 0
	if sumq2 > 0 {
		d = sumqx / sumq2
	}
	best := d * sumqx
	for itry := -ntry; itry <= ntry; itry++ {
		id = (float32(itry) + v0) / mx
		sumqx, sumq2 = 0, 0
		for _, v := range xb {
			q := float32(kvaluesIQ4NL[bestIndexIQ4NL(id*v)])
			w := v * v
			sumqx += w * q * v
			sumq2 += w * q * q
		}
		if sumq2 > 0 && sumqx*sumqx > best*sumq2 {
			d = sumqx / sumq2
			best = d * sumqx
		}
	}
	return d
}

// packIQ4 stores 32 code-book indices: low nibbles values 0–15, high 16–31.
func packIQ4(xb []float32, id float32, qs []byte) {
	for j := range 16 {
		qs[j] = uint8(bestIndexIQ4NL(id*xb[j])) | uint8(bestIndexIQ4NL(id*xb[j+16]))<<4
	}
}

func quantIQ4NL(x []float32, blk []byte) {
	d := iq4Fit(x)
	putHalf(blk, d)
	var id float32
	if d != 0 {
		id = 1 / d
	}
	packIQ4(x, id, blk[2:18])
}

// quantIQ4XS: a code-book fit per 32 values, the eight scales quantized to
// 6 bits (stored +32) against d = −max/32, indices re-chosen with the
// stored scales.
func quantIQ4XS(x []float32, blk []byte) {
	var scales [8]float32
	var maxScale, amax float32
	for ib := range 8 {
		scales[ib] = iq4Fit(x[32*ib : 32*ib+32])
		if a := abs32(scales[ib]); a > amax {
			amax, maxScale = a, scales[ib]
		}
	}
	d := -maxScale / 32
	putHalf(blk, d)
	var id float32
	if d != 0 {
		id = 1 / d
	}
	var sh uint16
	for ib := range 8 {
		l := max(-32, min(31, nearestInt(id*scales[ib])))
		dl := d * float32(l)
		var idl float32
		if dl != 0 {
			idl = 1 / dl
		}
		packIQ4(x[32*ib:32*ib+32], idl, blk[8+16*ib:8+16*ib+16])
		l += 32
		blk[4+ib/2] |= uint8(l&0xf) << (4 * (ib % 2))
		sh |= uint16(l>>4) << (2 * ib)
	}
	binary.LittleEndian.PutUint16(blk[2:], sh)
}
