//go:build amd64

#include "textflag.h"
#include "rows_amd64.h"

// AVX-512 kernels of the small-batch GEMM (gemm16.go): the x rows, packed
// k-major (sixteen x values per k, one zmm), against sixteen weight rows read
// in place, each weight element an embedded-broadcast operand of one FMA.

// TILE_ZERO clears the 16×16 accumulator tile Z0–Z15; TILE_LOAD and
// TILE_STORE move it from and to the tile at DI (both kernels below).
#define TILE_ZERO \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11 \
	VPXORD Z12, Z12, Z12 \
	VPXORD Z13, Z13, Z13 \
	VPXORD Z14, Z14, Z14 \
	VPXORD Z15, Z15, Z15

#define TILE_LOAD \
	VMOVUPS 0(DI), Z0 \
	VMOVUPS 64(DI), Z1 \
	VMOVUPS 128(DI), Z2 \
	VMOVUPS 192(DI), Z3 \
	VMOVUPS 256(DI), Z4 \
	VMOVUPS 320(DI), Z5 \
	VMOVUPS 384(DI), Z6 \
	VMOVUPS 448(DI), Z7 \
	VMOVUPS 512(DI), Z8 \
	VMOVUPS 576(DI), Z9 \
	VMOVUPS 640(DI), Z10 \
	VMOVUPS 704(DI), Z11 \
	VMOVUPS 768(DI), Z12 \
	VMOVUPS 832(DI), Z13 \
	VMOVUPS 896(DI), Z14 \
	VMOVUPS 960(DI), Z15

#define TILE_STORE \
	VMOVUPS Z0, 0(DI) \
	VMOVUPS Z1, 64(DI) \
	VMOVUPS Z2, 128(DI) \
	VMOVUPS Z3, 192(DI) \
	VMOVUPS Z4, 256(DI) \
	VMOVUPS Z5, 320(DI) \
	VMOVUPS Z6, 384(DI) \
	VMOVUPS Z7, 448(DI) \
	VMOVUPS Z8, 512(DI) \
	VMOVUPS Z9, 576(DI) \
	VMOVUPS Z10, 640(DI) \
	VMOVUPS Z11, 704(DI) \
	VMOVUPS Z12, 768(DI) \
	VMOVUPS Z13, 832(DI) \
	VMOVUPS Z14, 896(DI) \
	VMOVUPS Z15, 960(DI)

// KT does one k: the sixteen x values at xoff(SI) into zr, then sixteen
// broadcast-FMAs of w[r][k] (rows at R8, R9, R10, R11 + {0,1,2,3}·AX, byte
// offset woff) into Z0..Z15.
#define KT(xoff, woff, zr) \
	VMOVUPS          xoff(SI), zr              \
	VFMADD231PS.BCST woff(R8), zr, Z0          \
	VFMADD231PS.BCST woff(R8)(AX*1), zr, Z1    \
	VFMADD231PS.BCST woff(R8)(AX*2), zr, Z2    \
	VFMADD231PS.BCST woff(R8)(DX*1), zr, Z3    \
	VFMADD231PS.BCST woff(R9), zr, Z4          \
	VFMADD231PS.BCST woff(R9)(AX*1), zr, Z5    \
	VFMADD231PS.BCST woff(R9)(AX*2), zr, Z6    \
	VFMADD231PS.BCST woff(R9)(DX*1), zr, Z7    \
	VFMADD231PS.BCST woff(R10), zr, Z8         \
	VFMADD231PS.BCST woff(R10)(AX*1), zr, Z9   \
	VFMADD231PS.BCST woff(R10)(AX*2), zr, Z10  \
	VFMADD231PS.BCST woff(R10)(DX*1), zr, Z11  \
	VFMADD231PS.BCST woff(R11), zr, Z12        \
	VFMADD231PS.BCST woff(R11)(AX*1), zr, Z13  \
	VFMADD231PS.BCST woff(R11)(AX*2), zr, Z14  \
	VFMADD231PS.BCST woff(R11)(DX*1), zr, Z15

// KT8(xoff) does eight k from x byte offset xoff (x values alternating
// between Z16 and Z17), the first or second half of a sixteen-k step;
// KT_NEXT16 moves x and the weight rows on by sixteen k.
#define KT8(xoff) \
	KT(xoff, xoff/16, Z16)       \
	KT(xoff+64, xoff/16+4, Z17)  \
	KT(xoff+128, xoff/16+8, Z16) \
	KT(xoff+192, xoff/16+12, Z17) \
	KT(xoff+256, xoff/16+16, Z16) \
	KT(xoff+320, xoff/16+20, Z17) \
	KT(xoff+384, xoff/16+24, Z16) \
	KT(xoff+448, xoff/16+28, Z17)

#define KT_NEXT16 \
	ADDQ $1024, SI \
	ADDQ $64, R8   \
	ADDQ $64, R9   \
	ADDQ $64, R10  \
	ADDQ $64, R11  \
	SUBQ $16, CX

// PF16 prefetches the line 512 bytes (eight loop iterations) ahead in each
// of the sixteen weight rows: weights read in place stream from memory in
// sixteen short strided runs the hardware prefetcher does not get ahead of.
#define PF16 \
	PREFETCHT0 512(R8)          \
	PREFETCHT0 512(R8)(AX*1)    \
	PREFETCHT0 512(R8)(AX*2)    \
	PREFETCHT0 512(R8)(DX*1)    \
	PREFETCHT0 512(R9)          \
	PREFETCHT0 512(R9)(AX*1)    \
	PREFETCHT0 512(R9)(AX*2)    \
	PREFETCHT0 512(R9)(DX*1)    \
	PREFETCHT0 512(R10)         \
	PREFETCHT0 512(R10)(AX*1)   \
	PREFETCHT0 512(R10)(AX*2)   \
	PREFETCHT0 512(R10)(DX*1)   \
	PREFETCHT0 512(R11)         \
	PREFETCHT0 512(R11)(AX*1)   \
	PREFETCHT0 512(R11)(AX*2)   \
	PREFETCHT0 512(R11)(DX*1)

// func gemmT16AVX512(w *float32, ws int, xt *float32, kc int, tile *float32, acc int)
// tile[r*16+i] (acc != 0: +)= Σ_{k<kc} w[r*ws+k]·xt[k*16+i] for r, i < 16;
// kc >= 1.
TEXT ·gemmT16AVX512(SB), NOSPLIT, $0-48

// TILE_ARGS loads the arguments both kernels share: the sixteen weight rows
// at R8–R11 + {0,1,2,3}·AX (AX the row stride in bytes, DX = 3·AX), xt in
// SI, kc in CX, the tile in DI. TILE_INIT(lload, lloop) then clears the
// tile, or loads it when acc is set, and goes on at lloop.
#define TILE_ARGS \
	MOVQ w+0(FP), R8      \
	MOVQ ws+8(FP), AX     \
	SHLQ $2, AX           \
	LEAQ (AX)(AX*2), DX   \
	LEAQ (R8)(AX*4), R9   \
	LEAQ (R9)(AX*4), R10  \
	LEAQ (R10)(AX*4), R11 \
	MOVQ xt+16(FP), SI    \
	MOVQ kc+24(FP), CX    \
	MOVQ tile+32(FP), DI

#define TILE_INIT(lload, lloop) \
	MOVQ  acc+40(FP), BX \
	TESTQ BX, BX         \
	JNZ   lload          \
	TILE_ZERO            \
	JMP   lloop          \
lload:                       \
	TILE_LOAD

	TILE_ARGS
	TILE_INIT(load, loop16)

loop16:
	CMPQ CX, $16
	JL   loop1
	KT8(0)
	KT8(512)
	PF16
	KT_NEXT16
	JMP  loop16

loop1:
	TESTQ CX, CX
	JZ    store
	KT(0, 0, Z16)
	ADDQ  $64, SI
	ADDQ  $4, R8
	ADDQ  $4, R9
	ADDQ  $4, R10
	ADDQ  $4, R11
	DECQ  CX
	JMP   loop1

store:
	TILE_STORE
	VZEROUPPER
	RET

// func gemmT16StageAVX512(w *float32, ws int, xt *float32, kc int, tile *float32, acc int, src *byte, ss int, dst *float32, n16, rows, kind int, pf *byte, pfs int)
// gemmT16AVX512 (kc a multiple of 16) that also stages the next chunk, as
// the stagers below do: rows (16) weight rows of 16·n16 columns from src
// (row stride ss bytes; kind 0 f32, 1 f16, 2 bf16) to f32 rows of 272
// floats at dst, one row per sixteen k, the rest after the last. The
// conversions' loads then wait for memory beside the FMAs instead of in a
// loop of their own. Each staged row also prefetches the same columns of a
// row of the tile staged after it (pf, rows pfs bytes apart). rows is
// overwritten.
TEXT ·gemmT16StageAVX512(SB), NOSPLIT, $0-112

// CVLOOP(l, LD, sc) converts the row at R12 with loader LD, sixteen
// columns a step, reading at sc times the f16-byte offset BX.
#define CVLOOP(l, LD, sc)            \
l:                                   \
	PREFETCHT0 (R14)(BX*sc)      \
	LD((R12)(BX*sc), Z18)        \
	VMOVUPS    Z18, (R13)(BX*2)  \
	ADDQ       $32, BX           \
	CMPQ       BX, R15           \
	JL         l

// CVROW stages one row of the next chunk while the kernel multiplies this
// one: 16·n16 weights from R12 (f32, f16 or bf16 by kind) to f32 at R13,
// BX the f16-byte offset (f32 sources read at twice it), R15 = 32·n16;
// R14 walks the rows of the tile after (pf, stride pfs) for the prefetch.
#define CVROW(lf32, lf16, lbf16, ldone) \
	XORQ BX, BX                  \
	CMPQ kind+88(FP), $1         \
	JEQ  lf16                    \
	JGT  lbf16                   \
	CVLOOP(lf32, LDF32, 2)       \
	JMP  ldone                   \
	CVLOOP(lf16, LDF16, 1)       \
	JMP  ldone                   \
	CVLOOP(lbf16, LDBF16, 1)     \
ldone:                           \
	MOVQ ss+56(FP), BX           \
	ADDQ BX, R12                 \
	ADDQ pfs+104(FP), R14        \
	ADDQ $1088, R13              \
	DECQ rows+80(FP)

	TILE_ARGS
	MOVQ src+48(FP), R12
	MOVQ pf+96(FP), R14
	MOVQ dst+64(FP), R13
	MOVQ n16+72(FP), R15
	SHLQ $5, R15
	TILE_INIT(sload, sloop16)

sloop16:
	CMPQ CX, $16
	JL   srest
	KT8(0)
	CMPQ rows+80(FP), $0
	JLE  snocv
	CVROW(lcf32, lcf16, lcbf16, lcdone)

snocv:
	KT8(512)
	KT_NEXT16
	JMP  sloop16

srest:
	CMPQ rows+80(FP), $0
	JLE  sstore
	CVROW(lrf32, lrf16, lrbf16, lrdone)
	JMP  srest

sstore:
	TILE_STORE
	VZEROUPPER
	RET

// The stagers convert 16 weight rows (row j at src + j*ss bytes) × 16·n16
// columns to f32 rows of gemmTStride (272) floats: dst[j*272+k] = W[j][k];
// n16 >= 1.

// STAGE_ROWS expects DI = dst, SI = src, R8 = ss, DX = n16. It prefetches
// the same columns of the sixteen rows after these (R11 = 16·ss): a work
// item stages consecutive tiles (gemm16.go), so that is its next tile's
// data, fetched while this one is multiplied, as the GEMM packers do.
#define STAGE_ROWS(LD, sstep) \
	MOVQ R8, R11               \
	SHLQ $4, R11               \
	MOVQ $16, BX               \
srow:                          \
	MOVQ DX, CX                \
	MOVQ SI, R9                \
	MOVQ DI, R10               \
scol:                          \
	PREFETCHT0 (R9)(R11*1)     \
	LD((R9), Z0)               \
	VMOVUPS Z0, (R10)          \
	ADDQ    $sstep, R9         \
	ADDQ    $64, R10           \
	DECQ    CX                 \
	JNZ     scol               \
	ADDQ    R8, SI             \
	ADDQ    $1088, DI          \
	DECQ    BX                 \
	JNZ     srow               \
	VZEROUPPER                 \
	RET

// func stage16F32AVX512(dst *float32, src *byte, ss, n16 int)
TEXT ·stage16F32AVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ss+16(FP), R8
	MOVQ n16+24(FP), DX
	STAGE_ROWS(LDF32, 64)

// func stage16F16AVX512(dst *float32, src *byte, ss, n16 int)
TEXT ·stage16F16AVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ss+16(FP), R8
	MOVQ n16+24(FP), DX
	STAGE_ROWS(LDF16, 32)

// func stage16BF16AVX512(dst *float32, src *byte, ss, n16 int)
TEXT ·stage16BF16AVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ss+16(FP), R8
	MOVQ n16+24(FP), DX
	STAGE_ROWS(LDBF16, 32)

// func gemmTStoreAVX512(tile *float32, out *float32, ldc, m, nr int)
// out[i*ldc+r] = tile[r*16+i] for i < m, r < nr (1 <= m, nr <= 16): the
// 16×16 tile transposed in registers (32-bit, 64-bit and two 128-bit-lane
// shuffle stages), x row i stored with a mask of nr lanes.
TEXT ·gemmTStoreAVX512(SB), NOSPLIT, $0-40
	MOVQ    tile+0(FP), SI
	VMOVUPS 0(SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 128(SI), Z2
	VMOVUPS 192(SI), Z3
	VMOVUPS 256(SI), Z4
	VMOVUPS 320(SI), Z5
	VMOVUPS 384(SI), Z6
	VMOVUPS 448(SI), Z7
	VMOVUPS 512(SI), Z8
	VMOVUPS 576(SI), Z9
	VMOVUPS 640(SI), Z10
	VMOVUPS 704(SI), Z11
	VMOVUPS 768(SI), Z12
	VMOVUPS 832(SI), Z13
	VMOVUPS 896(SI), Z14
	VMOVUPS 960(SI), Z15

	// 32-bit interleave of row pairs.
	VUNPCKLPS Z1, Z0, Z16
	VUNPCKHPS Z1, Z0, Z17
	VUNPCKLPS Z3, Z2, Z18
	VUNPCKHPS Z3, Z2, Z19
	VUNPCKLPS Z5, Z4, Z20
	VUNPCKHPS Z5, Z4, Z21
	VUNPCKLPS Z7, Z6, Z22
	VUNPCKHPS Z7, Z6, Z23
	VUNPCKLPS Z9, Z8, Z24
	VUNPCKHPS Z9, Z8, Z25
	VUNPCKLPS Z11, Z10, Z26
	VUNPCKHPS Z11, Z10, Z27
	VUNPCKLPS Z13, Z12, Z28
	VUNPCKHPS Z13, Z12, Z29
	VUNPCKLPS Z15, Z14, Z30
	VUNPCKHPS Z15, Z14, Z31

	// 64-bit interleave: Z(4g+c) lane L = column 4L+c of rows 4g..4g+3.
	VUNPCKLPD Z18, Z16, Z0
	VUNPCKHPD Z18, Z16, Z1
	VUNPCKLPD Z19, Z17, Z2
	VUNPCKHPD Z19, Z17, Z3
	VUNPCKLPD Z22, Z20, Z4
	VUNPCKHPD Z22, Z20, Z5
	VUNPCKLPD Z23, Z21, Z6
	VUNPCKHPD Z23, Z21, Z7
	VUNPCKLPD Z26, Z24, Z8
	VUNPCKHPD Z26, Z24, Z9
	VUNPCKLPD Z27, Z25, Z10
	VUNPCKHPD Z27, Z25, Z11
	VUNPCKLPD Z30, Z28, Z12
	VUNPCKHPD Z30, Z28, Z13
	VUNPCKLPD Z31, Z29, Z14
	VUNPCKHPD Z31, Z29, Z15

	// Lanes: Z(16+c) = (Zc.L0, Zc.L2, Z(4+c).L0, Z(4+c).L2), Z(20+c) the odd
	// lanes; Z(24+c), Z(28+c) likewise from Z(8+c), Z(12+c).
	VSHUFF32X4 $0x88, Z4, Z0, Z16
	VSHUFF32X4 $0x88, Z5, Z1, Z17
	VSHUFF32X4 $0x88, Z6, Z2, Z18
	VSHUFF32X4 $0x88, Z7, Z3, Z19
	VSHUFF32X4 $0xdd, Z4, Z0, Z20
	VSHUFF32X4 $0xdd, Z5, Z1, Z21
	VSHUFF32X4 $0xdd, Z6, Z2, Z22
	VSHUFF32X4 $0xdd, Z7, Z3, Z23
	VSHUFF32X4 $0x88, Z12, Z8, Z24
	VSHUFF32X4 $0x88, Z13, Z9, Z25
	VSHUFF32X4 $0x88, Z14, Z10, Z26
	VSHUFF32X4 $0x88, Z15, Z11, Z27
	VSHUFF32X4 $0xdd, Z12, Z8, Z28
	VSHUFF32X4 $0xdd, Z13, Z9, Z29
	VSHUFF32X4 $0xdd, Z14, Z10, Z30
	VSHUFF32X4 $0xdd, Z15, Z11, Z31

	// Zj = column j of the tile = x row j of the output.
	VSHUFF32X4 $0x88, Z24, Z16, Z0
	VSHUFF32X4 $0x88, Z25, Z17, Z1
	VSHUFF32X4 $0x88, Z26, Z18, Z2
	VSHUFF32X4 $0x88, Z27, Z19, Z3
	VSHUFF32X4 $0x88, Z28, Z20, Z4
	VSHUFF32X4 $0x88, Z29, Z21, Z5
	VSHUFF32X4 $0x88, Z30, Z22, Z6
	VSHUFF32X4 $0x88, Z31, Z23, Z7
	VSHUFF32X4 $0xdd, Z24, Z16, Z8
	VSHUFF32X4 $0xdd, Z25, Z17, Z9
	VSHUFF32X4 $0xdd, Z26, Z18, Z10
	VSHUFF32X4 $0xdd, Z27, Z19, Z11
	VSHUFF32X4 $0xdd, Z28, Z20, Z12
	VSHUFF32X4 $0xdd, Z29, Z21, Z13
	VSHUFF32X4 $0xdd, Z30, Z22, Z14
	VSHUFF32X4 $0xdd, Z31, Z23, Z15

	MOVQ  nr+32(FP), CX
	MOVQ  $1, DX
	SHLQ  CX, DX
	DECQ  DX
	KMOVW DX, K1
	MOVQ  out+8(FP), DI
	MOVQ  ldc+16(FP), BX
	SHLQ  $2, BX
	MOVQ  m+24(FP), CX

#define STX(z) \
	VMOVUPS z, K1, (DI) \
	DECQ    CX          \
	JZ      stdone      \
	ADDQ    BX, DI

	STX(Z0)
	STX(Z1)
	STX(Z2)
	STX(Z3)
	STX(Z4)
	STX(Z5)
	STX(Z6)
	STX(Z7)
	STX(Z8)
	STX(Z9)
	STX(Z10)
	STX(Z11)
	STX(Z12)
	STX(Z13)
	STX(Z14)
	VMOVUPS Z15, K1, (DI)

stdone:
	VZEROUPPER
	RET
