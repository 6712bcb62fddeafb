package cpu

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// Packed GEMM for MatMul with m >= gemmMinM x rows (prefill). The weight rows
// are split into panels of gemmNR rows; for each chunk of gemmKC columns a
// panel is converted to f32 and packed k-major (pk[k*gemmNR+j] = W[r0+j][k0+k])
// into a per-worker buffer that stays in L1, then a register tile of out is
// accumulated per k from the panel row and broadcasts of x: 16×16 or 12×16
// with AVX-512 (one zmm load, sixteen or twelve broadcast-FMAs per k), 6×16 with AVX2 (two
// ymm loads, six broadcasts, twelve FMAs), or the portable Go kernel. Every
// weight element is converted once per call (per gemmMC block of x rows)
// rather than once per four x rows as in the dot-product tiles, and there are
// no horizontal sums. Tiles accumulate into out across k chunks.
const (
	gemmMR = 6   // x rows per AVX2 tile (the AVX-512 tile has 2*gemmMR)
	gemmNR = 16  // weight rows per panel (two ymm or one zmm vector)
	gemmKC = 256 // columns per packed chunk: 16 KiB of panel, a multiple of Q8Block
	gemmMC = 256 // most x rows per work item: a 256×256 f32 block of x stays in L2
	// gemm16MR x rows per AVX-512 16-row tile, taken wherever 16 x rows
	// remain against a full panel: a decode batch of 16 is one tile, not a
	// 12-row tile plus a 6-row one with two padded rows.
	gemm16MR = 16
	// gemm16Alias: x rows whose stride is a multiple of 4 KiB (1024
	// floats) all fall in one L1 set, and sixteen of them overflow its
	// ways; such shapes (an FFN width of 2048, 4096) keep the 12-row tile,
	// which measured 20–30 % faster there.
	gemm16Alias = 1024
)

// gemmBufLen is the per-worker packing buffer in floats, with room to align
// the panel to a cache line.
const gemmBufLen = gemmNR*gemmKC + 16

// gemmTask is one GEMM MatMul split into work items of (x-row block, run of
// grp consecutive panels). An item walks its panels in memory order, so the
// packers' prefetch of the next panel (gemm_amd64.s) fetches the item's own
// next data while the current panel is multiplied.
type gemmTask struct {
	out, x []float32
	m      int
	w      Matrix
	rb     int
	npan   int // panels of gemmNR weight rows
	grp    int // panels per work item
	ngrp   int // work items per x-row block
	mc     int // x rows per block (at most gemmMC)
	ch     chunker
}

// init sets up the call for threads workers: about eight items each, which
// balances load when a core is shared.
func (t *gemmTask) init(out, x []float32, m int, w Matrix, rb, threads int) {
	t.out, t.x, t.m, t.w, t.rb = out, x, m, w, rb
	t.npan = (w.Rows + gemmNR - 1) / gemmNR
	// Blocks of equal size rounded up to whole 16-row tiles: a 512-row
	// prefill chunk is two blocks of 256, not 240 + 240 + a 32-row block
	// that packs every panel again for two tiles.
	xblocks := (m + gemmMC - 1) / gemmMC
	t.mc = ((m+xblocks-1)/xblocks + gemm16MR - 1) / gemm16MR * gemm16MR
	xblocks = (m + t.mc - 1) / t.mc
	t.grp = max(1, t.npan*xblocks/(8*threads))
	t.ngrp = (t.npan + t.grp - 1) / t.grp
	t.ch.reset(t.ngrp * xblocks)
}

func (t *gemmTask) run(int) {
	// The scratch lives on the worker's stack: it needs no Pool state, works
	// for a nil Pool and allocates nothing.
	var buf [gemmBufLen]float32
	var xt [2 * gemmMR * gemmKC]float32
	off := int(-uintptr(unsafe.Pointer(&buf[0]))&63) / 4
	pk := buf[off : off+gemmNR*gemmKC]
	for c := t.ch.take(); c >= 0; c = t.ch.take() {
		xb, g := c/t.ngrp, c%t.ngrp
		for p := g * t.grp; p < min((g+1)*t.grp, t.npan); p++ {
			t.item(xb, p, pk, &xt)
		}
	}
}

// item computes out for x rows [i0, i1) of x-row block xb and weight rows
// [r0, r0+nr) of panel p. Full tiles are written in place; partial ones
// (fewer x rows or weight rows) go through tile and are copied out. xt holds
// the x rows of a partial 12-row tile, which the 12-row kernel addresses by
// a fixed stride.
func (t *gemmTask) item(xb, p int, pk []float32, xt *[2 * gemmMR * gemmKC]float32) {
	cols, rows := t.w.Cols, t.w.Rows
	i0 := xb * t.mc
	i1 := min(i0+t.mc, t.m)
	r0 := p * gemmNR
	nr := min(gemmNR, rows-r0)
	var xo [gemmMR]int
	var tile [2 * gemmMR * gemmNR]float32
	for k0 := 0; k0 < cols; k0 += gemmKC {
		kc := min(gemmKC, cols-k0)
		packPanel(pk, t.w, t.rb, r0, nr, k0, kc)
		acc := k0 > 0
		for i := i0; i < i1; {
			if i1-i >= gemm16MR && nr == gemmNR && cols%gemm16Alias != 0 &&
				gemmTile16SIMD(t.out, i*rows+r0, rows, t.x, i*cols+k0, cols, pk, kc, acc) {
				i += gemm16MR
				continue
			}
			mr := min(2*gemmMR, i1-i)
			if mr > gemmMR && useSIMD && useAVX512 {
				x, xoff, xs := t.x, i*cols+k0, cols
				if mr < 2*gemmMR {
					for ii := range mr {
						copy(xt[ii*gemmKC:][:kc], t.x[(i+ii)*cols+k0:][:kc])
					}
					x, xoff, xs = xt[:], 0, gemmKC
				}
				if mr == 2*gemmMR && nr == gemmNR {
					if gemmTile12SIMD(t.out, i*rows+r0, rows, x, xoff, xs, pk, kc, acc) {
						i += mr
						continue
					}
				} else if gemmTile12SIMD(tile[:], 0, gemmNR, x, xoff, xs, pk, kc, false) {
					writeTile(t.out, tile[:], i, mr, rows, r0, nr, acc)
					i += mr
					continue
				}
			}
			mr = min(gemmMR, i1-i)
			for j := range xo {
				// Rows past the end repeat the last row; their results are dropped.
				xo[j] = (i+min(j, mr-1))*cols + k0
			}
			if mr == gemmMR && nr == gemmNR && gemmTileSIMD(t.out, i*rows+r0, rows, t.x, &xo, pk, kc, acc) {
				i += mr
				continue
			}
			if !gemmTileSIMD(tile[:], 0, gemmNR, t.x, &xo, pk, kc, false) {
				gemmTileGo((*[gemmMR * gemmNR]float32)(tile[:]), t.x, &xo, pk, kc)
			}
			writeTile(t.out, tile[:], i, mr, rows, r0, nr, acc)
			i += mr
		}
	}
}

// writeTile stores (acc: adds) the mr×nr corner of a tile with row stride
// gemmNR to out at x row i, weight row r0.
func writeTile(out, tile []float32, i, mr, rows, r0, nr int, acc bool) {
	for ii := range mr {
		o := out[(i+ii)*rows+r0:][:nr]
		s := tile[ii*gemmNR:][:nr]
		if acc {
			for j := range o {
				o[j] += s[j]
			}
		} else {
			copy(o, s)
		}
	}
}

// gemmTileGo is the portable microkernel: tile[i*gemmNR+j] = Σ_k
// x[xo[i]+k]·pk[k*gemmNR+j], two x rows × four panel columns at a time.
func gemmTileGo(tile *[gemmMR * gemmNR]float32, x []float32, xo *[gemmMR]int, pk []float32, kc int) {
	pk = pk[:kc*gemmNR]
	for i := 0; i < gemmMR; i += 2 {
		xa, xb := x[xo[i]:][:kc], x[xo[i+1]:][:kc]
		for j := 0; j < gemmNR; j += 4 {
			var a0, a1, a2, a3, b0, b1, b2, b3 float32
			p := pk[j:]
			for k, u := range xa {
				q := p[k*gemmNR : k*gemmNR+4 : k*gemmNR+4]
				v := xb[k]
				a0 += u * q[0]
				a1 += u * q[1]
				a2 += u * q[2]
				a3 += u * q[3]
				b0 += v * q[0]
				b1 += v * q[1]
				b2 += v * q[2]
				b3 += v * q[3]
			}
			ta, tb := tile[i*gemmNR+j:][:4], tile[(i+1)*gemmNR+j:][:4]
			ta[0], ta[1], ta[2], ta[3] = a0, a1, a2, a3
			tb[0], tb[1], tb[2], tb[3] = b0, b1, b2, b3
		}
	}
}

// packPanel converts and packs columns [k0, k0+kc) of weight rows [r0, r0+nr)
// into pk[k*gemmNR+j]; rows past nr are zero. The GEMM runs the plain
// types; quantized weights always take the integer path (matmul_quant.go).
func packPanel(pk []float32, w Matrix, rb, r0, nr, k0, kc int) {
	done := 0
	if nr == gemmNR {
		done = packSIMD(pk, w, rb, r0, k0, kc)
	}
	if done == kc {
		return
	}
	k0, kc, pk = k0+done, kc-done, pk[done*gemmNR:]
	for j := range nr {
		row := w.Data[(r0+j)*rb : (r0+j+1)*rb]
		switch w.Type {
		case F32:
			for k, v := range bytesF32(row)[k0 : k0+kc] {
				pk[k*gemmNR+j] = v
			}
		case F16:
			for k := range kc {
				pk[k*gemmNR+j] = F16ToF32(binary.LittleEndian.Uint16(row[2*(k0+k):]))
			}
		case BF16:
			for k := range kc {
				pk[k*gemmNR+j] = BF16ToF32(binary.LittleEndian.Uint16(row[2*(k0+k):]))
			}
		}
	}
	for j := nr; j < gemmNR; j++ {
		for k := range kc {
			pk[k*gemmNR+j] = 0
		}
	}
}

// gemmMinMOverride, when positive, replaces gemmMinM's measured thresholds;
// tests set it to drive every shape through one path.
var gemmMinMOverride int

// gemmMinM is the smallest m for which the GEMM path beats the dot-product
// tiles for the plain types (quantized weights never take it), as measured on a 2-core Sapphire Rapids VM (BenchmarkMatMulGEMM and
// smaller m): with AVX-512 a full 12-row tile pays from m = 12; with AVX2 only
// the panel packing needs m ≈ 32 to pay off; the portable Go microkernel only
// wins where it saves per-element conversions (f16, bf16).
func gemmMinM(t DType) int {
	switch {
	case gemmMinMOverride > 0:
		return gemmMinMOverride
	case useSIMD && useAVX512:
		return 12
	case useSIMD:
		return 32
	case t == F16 || t == BF16:
		return 16
	}
	return math.MaxInt
}
