//go:build amd64

#include "textflag.h"

// Four-activation-row siblings of qdot_amd64.s's kernels, for MatMul with
// m ≥ 4 (batched decode, prefill): each weight block is loaded and
// unpacked once and dotted with four quantized activation rows, so the
// unpacking and the block's scale work are shared four ways. Signature:
//
//	func dot4Rows<F>AVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)
//
// sets out[r + i·os] = row r · activation row i (at x + i·xs bytes) for
// i < 4, r < n; nb ≥ 1 blocks per row. Registers: R8 rb, R9 rows left, R10
// out, R11 row start, R14 xs; SI the weight block, DI and R13 activation
// rows 0 and 3 (rows 1 and 2 at DI+xs, DI+2xs), CX blocks left; AX, BX,
// DX, R12 scratch. The four sums are Y0, Y6, Y7, Y8.

// 32-byte constants (file-local: as in qdot_amd64.s).
DATA nib4x4<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4x4<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4x4<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4x4<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL nib4x4<>(SB), RODATA|NOPTR, $32

DATA ones16x4<>+0(SB)/8, $0x0001000100010001
DATA ones16x4<>+8(SB)/8, $0x0001000100010001
DATA ones16x4<>+16(SB)/8, $0x0001000100010001
DATA ones16x4<>+24(SB)/8, $0x0001000100010001
GLOBL ones16x4<>(SB), RODATA|NOPTR, $32

DATA three8x4<>+0(SB)/8, $0x0303030303030303
DATA three8x4<>+8(SB)/8, $0x0303030303030303
DATA three8x4<>+16(SB)/8, $0x0303030303030303
DATA three8x4<>+24(SB)/8, $0x0303030303030303
GLOBL three8x4<>(SB), RODATA|NOPTR, $32

DATA pairshufx4<>+0(SB)/8, $0x0100010001000100
DATA pairshufx4<>+8(SB)/8, $0x0100010001000100
DATA pairshufx4<>+16(SB)/8, $0x0302030203020302
DATA pairshufx4<>+24(SB)/8, $0x0302030203020302
GLOBL pairshufx4<>(SB), RODATA|NOPTR, $32

DATA bitshufx4<>+0(SB)/8, $0x0000000000000000
DATA bitshufx4<>+8(SB)/8, $0x0101010101010101
DATA bitshufx4<>+16(SB)/8, $0x0202020202020202
DATA bitshufx4<>+24(SB)/8, $0x0303030303030303
GLOBL bitshufx4<>(SB), RODATA|NOPTR, $32

DATA bitmaskx4<>+0(SB)/8, $0x7fbfdfeff7fbfdfe
DATA bitmaskx4<>+8(SB)/8, $0x7fbfdfeff7fbfdfe
DATA bitmaskx4<>+16(SB)/8, $0x7fbfdfeff7fbfdfe
DATA bitmaskx4<>+24(SB)/8, $0x7fbfdfeff7fbfdfe
GLOBL bitmaskx4<>(SB), RODATA|NOPTR, $32

DATA allonesx4<>+0(SB)/8, $-1
DATA allonesx4<>+8(SB)/8, $-1
DATA allonesx4<>+16(SB)/8, $-1
DATA allonesx4<>+24(SB)/8, $-1
GLOBL allonesx4<>(SB), RODATA|NOPTR, $32

DATA hex10x4<>+0(SB)/8, $0x1010101010101010
DATA hex10x4<>+8(SB)/8, $0x1010101010101010
DATA hex10x4<>+16(SB)/8, $0x1010101010101010
DATA hex10x4<>+24(SB)/8, $0x1010101010101010
GLOBL hex10x4<>(SB), RODATA|NOPTR, $32

DATA one8x4<>+0(SB)/8, $0x0101010101010101
DATA one8x4<>+8(SB)/8, $0x0101010101010101
DATA one8x4<>+16(SB)/8, $0x0101010101010101
DATA one8x4<>+24(SB)/8, $0x0101010101010101
GLOBL one8x4<>(SB), RODATA|NOPTR, $32

// mxfp4x4 is MXFP4's doubled E2M1 values in both lanes (kvaluesMXFP4).
DATA mxfp4x4<>+0(SB)/8, $0x0c08060403020100
DATA mxfp4x4<>+8(SB)/8, $0xf4f8fafcfdfeff00
DATA mxfp4x4<>+16(SB)/8, $0x0c08060403020100
DATA mxfp4x4<>+24(SB)/8, $0xf4f8fafcfdfeff00
GLOBL mxfp4x4<>(SB), RODATA|NOPTR, $32

DATA eighthx4<>+0(SB)/4, $0.125
GLOBL eighthx4<>(SB), RODATA|NOPTR, $4

DATA one32x4<>+0(SB)/4, $1.0
GLOBL one32x4<>(SB), RODATA|NOPTR, $4

DATA two32x4<>+0(SB)/4, $2.0
GLOBL two32x4<>(SB), RODATA|NOPTR, $4

#define X4ARGS \
	MOVQ w+0(FP), R11    \
	MOVQ rb+8(FP), R8    \
	MOVQ n+16(FP), R9    \
	MOVQ xs+32(FP), R14  \
	MOVQ out+48(FP), R10

#define X4START \
	MOVQ   R11, SI              \
	MOVQ   x+24(FP), DI         \
	LEAQ   (DI)(R14*2), R13     \
	ADDQ   R14, R13             \
	MOVQ   nb+40(FP), CX        \
	VXORPS Y0, Y0, Y0           \
	VXORPS Y6, Y6, Y6           \
	VXORPS Y7, Y7, Y7           \
	VXORPS Y8, Y8, Y8

// X4STORE reduces the four sums and stores them os apart from (R10).
#define X4STORE1(acc, xacc) \
	VEXTRACTF128 $1, acc, X1 \
	VADDPS       X1, xacc, X1 \
	VHADDPS      X1, X1, X1  \
	VHADDPS      X1, X1, X1  \
	VMOVSS       X1, (AX)    \
	ADDQ         BX, AX

#define X4END \
	MOVQ     R10, AX       \
	MOVQ     os+56(FP), BX \
	SHLQ     $2, BX        \
	X4STORE1(Y0, X0)       \
	X4STORE1(Y6, X6)       \
	X4STORE1(Y7, X7)       \
	X4STORE1(Y8, X8)       \
	ADDQ     $4, R10       \
	ADDQ     R8, R11       \
	DECQ     R9

// Q8X4ROW(xr, acc): one activation row's block (codes at 8(xr), d at
// 0(xr)) times the signed codes (|w| in Y2, w in Y1, d_w in Y5).
#define Q8X4ROW(xr, acc) \
	VMOVDQU      8 xr, Y3     \
	VPSIGNB      Y1, Y3, Y3   \
	VPMADDUBSW   Y3, Y2, Y3   \
	VPMADDWD     Y15, Y3, Y3  \
	VCVTDQ2PS    Y3, Y3       \
	VBROADCASTSS xr, Y4       \
	VMULPS       Y5, Y4, Y4   \
	VFMADD231PS  Y4, Y3, acc

// K-quant four-row kernels keep per-row int32 block sums in Y9–Y12 and
// their scale words on the stack (0(SP)); Y13 holds the block's d at the
// end of each block.

// KX4ROWTAIL(xr, sum, acc): acc += d·d_x·float(sum) for one activation row,
// d (f32, every lane) in Y13.
#define KX4ROWTAIL(xr, sum, acc) \
	VCVTDQ2PS    sum, sum      \
	VBROADCASTSS xr, Y4        \
	VMULPS       Y13, Y4, Y4   \
	VFMADD231PS  Y4, sum, acc

// Q4KX4MIN(xr, acc): acc −= d_min·d_x·Σ m·(bsums pairs) for one row, the
// 8 min words at 16(SP) and d_min (every lane) in Y5.
#define Q4KX4MIN(xr, acc) \
	VMOVDQU      4 xr, Y3       \
	VEXTRACTI128 $1, Y3, X4     \
	VPHADDW      X4, X3, X3     \
	VPMADDWD     16(SP), X3, X3 \
	VCVTDQ2PS    Y3, Y3         \
	VBROADCASTSS xr, Y4         \
	VMULPS       Y5, Y4, Y4     \
	VFNMADD231PS Y4, Y3, acc

// Q4KX4HALF(xoff, codes, xr, sum): one activation row's products with 32
// codes, scaled by the scale words in Y15.
#define Q4KX4HALF(xoff, codes, xr, sum) \
	VPMADDUBSW   xoff xr, codes, Y3 \
	VPMADDWD     Y15, Y3, Y3        \
	VPADDD       Y3, sum, sum

#define Q4KX4CHUNK(qoff, xlo, xhi, slo, shi) \
	VMOVDQU      qoff(SI), Y1               \
	VPSRLW       $4, Y1, Y2                 \
	VPAND        Y14, Y1, Y1                \
	VPAND        Y14, Y2, Y2                \
	VPBROADCASTW slo(SP), Y15               \
	Q4KX4HALF(xlo, Y1, (DI), Y9)       \
	Q4KX4HALF(xlo, Y1, (DI)(R14*1), Y10) \
	Q4KX4HALF(xlo, Y1, (DI)(R14*2), Y11) \
	Q4KX4HALF(xlo, Y1, (R13), Y12)     \
	VPBROADCASTW shi(SP), Y15               \
	Q4KX4HALF(xhi, Y2, (DI), Y9)       \
	Q4KX4HALF(xhi, Y2, (DI)(R14*1), Y10) \
	Q4KX4HALF(xhi, Y2, (DI)(R14*2), Y11) \
	Q4KX4HALF(xhi, Y2, (R13), Y12)

// Q4_K/Q5_K scale unpacking in one 16-byte vector: P gathers each output's
// main byte (s0–3, s8–11 for the scales, s4–7, s8–11 for the minimums), Q
// the byte whose top two bits are the output's bits 4–5 (s0–3 for scales
// 4–7, s4–7 for minimums 4–7; zero elsewhere); out = (P & A) | ((P >> 4) &
// B) | ((Q >> 2) & 0x30).
DATA k4shufPx4<>+0(SB)/8, $0x0b0a090803020100
DATA k4shufPx4<>+8(SB)/8, $0x0b0a090807060504
GLOBL k4shufPx4<>(SB), RODATA|NOPTR, $16
DATA k4shufQx4<>+0(SB)/8, $0x0302010080808080
DATA k4shufQx4<>+8(SB)/8, $0x0706050480808080
GLOBL k4shufQx4<>(SB), RODATA|NOPTR, $16
DATA k4maskAx4<>+0(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA k4maskAx4<>+8(SB)/8, $0x000000003f3f3f3f
GLOBL k4maskAx4<>(SB), RODATA|NOPTR, $16
DATA k4maskBx4<>+0(SB)/8, $0x0000000000000000
DATA k4maskBx4<>+8(SB)/8, $0x0f0f0f0f00000000
GLOBL k4maskBx4<>(SB), RODATA|NOPTR, $16
DATA k4hix4<>+0(SB)/8, $0x3030303030303030
DATA k4hix4<>+8(SB)/8, $0x3030303030303030
GLOBL k4hix4<>(SB), RODATA|NOPTR, $16

// K4UNPACKx4 leaves the 8 scales and 8 minimums of the Q4_K/Q5_K block at
// SI as 16 words in Y3 (scales in the low lane); X1 and X2 are clobbered
// (the four sums live in Y0 and Y6–Y8).
#define K4UNPACKx4 \
	VMOVDQU   4(SI), X3                     \
	VPSHUFB   k4shufQx4<>(SB), X3, X2       \
	VPSHUFB   k4shufPx4<>(SB), X3, X3       \
	VPSRLW    $4, X3, X1                    \
	VPAND     k4maskBx4<>(SB), X1, X1       \
	VPAND     k4maskAx4<>(SB), X3, X3       \
	VPOR      X1, X3, X3                    \
	VPSRLW    $2, X2, X2                    \
	VPAND     k4hix4<>(SB), X2, X2          \
	VPOR      X2, X3, X3                    \
	VPMOVZXBW X3, Y3

// Q4KX4SCALES: 8 scale words to 0(SP), 8 min words to 16(SP), in one
// 32-byte store (so the loads of them that follow forward from it).
#define Q4KX4SCALES \
	K4UNPACKx4          \
	VMOVDQU   Y3, 0(SP)

#define KX4ZERO \
	VPXOR Y9, Y9, Y9    \
	VPXOR Y10, Y10, Y10 \
	VPXOR Y11, Y11, Y11 \
	VPXOR Y12, Y12, Y12

#define KX4TAILS(doff) \
	VPBROADCASTW doff(SI), X13          \
	VCVTPH2PS    X13, Y13               \
	KX4ROWTAIL((DI), Y9, Y0)            \
	KX4ROWTAIL((DI)(R14*1), Y10, Y6)    \
	KX4ROWTAIL((DI)(R14*2), Y11, Y7)    \
	KX4ROWTAIL((R13), Y12, Y8)

// Q6_K: the 16 int8 scales as words at 0(SP); each row's sum starts at
// −32·Σ sc·bsums; codes are built once per 32 values into Y1 and their
// pair-of-scales vector into Y15.
#define Q6KX4START(xr, sum) \
	VPMADDWD 4 xr, Y2, sum  \
	VPSLLD   $5, sum, sum   \
	VPXOR    Y3, Y3, Y3     \
	VPSUBD   sum, Y3, sum

#define Q6KX4ROW(xoff, xr, sum) \
	VPMADDUBSW xoff xr, Y1, Y3 \
	VPMADDWD   Y15, Y3, Y3     \
	VPADDD     Y3, sum, sum

#define Q6KX4GROUP(src, qshift, hshift, xoff, soff) \
	VPSRLW       $qshift, src, Y1      \
	VPAND        Y14, Y1, Y1           \
	VPSRLW       $hshift, Y5, Y3       \
	VPAND        three8x4<>(SB), Y3, Y3  \
	VPSLLW       $4, Y3, Y3            \
	VPOR         Y3, Y1, Y1            \
	VPBROADCASTD soff(SP), Y15         \
	VPSHUFB      pairshufx4<>(SB), Y15, Y15 \
	Q6KX4ROW(xoff, (DI), Y9)           \
	Q6KX4ROW(xoff, (DI)(R14*1), Y10)   \
	Q6KX4ROW(xoff, (DI)(R14*2), Y11)   \
	Q6KX4ROW(xoff, (R13), Y12)

#define Q6KX4HALF(ql, ql2, qh, x0, x1, x2, x3, s0, s1, s2, s3) \
	VMOVDQU ql(SI), Y2                  \
	VMOVDQU qh(SI), Y5                  \
	Q6KX4GROUP(Y2, 0, 0, x0, s0)        \
	Q6KX4GROUP(Y2, 4, 4, x2, s2)        \
	VMOVDQU ql2(SI), Y2                 \
	Q6KX4GROUP(Y2, 0, 2, x1, s1)        \
	Q6KX4GROUP(Y2, 4, 6, x3, s3)

// ---- 32-value formats with unsigned codes (Q4_0, Q4_1, Q5_0, Q5_1).

// NIB32X4(off) widens the 16 nibble bytes at off(SI) into 32 codes in Y1.
#define NIB32X4(off) \
	VMOVDQU     off(SI), X1    \
	VPSRLW      $4, X1, X2     \
	VINSERTI128 $1, X2, Y1, Y1 \
	VPAND       Y14, Y1, Y1

// FIFTHX4(off) ORs the fifth bits (u32 at off(SI)) into Y1 as 0x10.
#define FIFTHX4(off) \
	VPBROADCASTD off(SI), Y2             \
	VPSHUFB      bitshufx4<>(SB), Y2, Y2 \
	VPOR         bitmaskx4<>(SB), Y2, Y2 \
	VPCMPEQB     allonesx4<>(SB), Y2, Y2 \
	VPAND        hex10x4<>(SB), Y2, Y2   \
	VPOR         Y2, Y1, Y1

// LEGX4OFF(xr, acc): one activation row of an offset format (w =
// d·(q − 8k)): per lane, acc += d_w·(p·d_x − k·s_x), so the eight lanes
// together subtract 8k·d_w·s_x (k = 1 for Q4_0, 2 for Q5_0, in every lane
// of Y10).
#define LEGX4OFF(xr, acc) \
	VPMADDUBSW   8 xr, Y1, Y3  \
	VPMADDWD     Y15, Y3, Y3   \
	VCVTDQ2PS    Y3, Y3        \
	VBROADCASTSS xr, Y4        \
	VBROADCASTSS 4 xr, Y9      \
	VMULPS       Y10, Y9, Y9   \
	VFMSUB213PS  Y9, Y4, Y3    \
	VFMADD231PS  Y5, Y3, acc

// LEGX4MIN(xr, acc): one activation row of a minimum format (w = d·q + m):
// acc += d_w·d_x·p + (m/8)·s_x per lane (Y10: m/8 in every lane).
#define LEGX4MIN(xr, acc) \
	VPMADDUBSW   8 xr, Y1, Y3  \
	VPMADDWD     Y15, Y3, Y3   \
	VCVTDQ2PS    Y3, Y3        \
	VBROADCASTSS xr, Y4        \
	VMULPS       Y5, Y4, Y4    \
	VFMADD231PS  Y4, Y3, acc   \
	VBROADCASTSS 4 xr, Y9      \
	VFMADD231PS  Y10, Y9, acc

// LEGX4(codes, rowmacro, blockinit, bsize) is the whole kernel: codes
// builds a block's 32 codes in Y1, blockinit its per-block constant in
// Y10, rowmacro does one activation row.
#define LEGX4(codes, rowmacro, blockinit, bsize) \
	X4ARGS                        \
	VMOVDQU ones16x4<>(SB), Y15   \
	VMOVDQU nib4x4<>(SB), Y14     \
legx4row:                         \
	X4START                       \
legx4blk:                         \
	codes                         \
	VPBROADCASTW (SI), X5         \
	VCVTPH2PS    X5, Y5           \
	blockinit                     \
	rowmacro((DI), Y0)            \
	rowmacro((DI)(R14*1), Y6)     \
	rowmacro((DI)(R14*2), Y7)     \
	rowmacro((R13), Y8)           \
	ADDQ         $bsize, SI       \
	ADDQ         $40, DI          \
	ADDQ         $40, R13         \
	DECQ         CX               \
	JNZ          legx4blk         \
	X4END                         \
	JNZ          legx4row         \
	VZEROUPPER                    \
	RET

#define CODESQ4_0 NIB32X4(2)
#define CODESQ4_1 NIB32X4(4)
#define CODESQ5_0 \
	NIB32X4(6)  \
	FIFTHX4(2)
#define CODESQ5_1 \
	NIB32X4(8)  \
	FIFTHX4(4)

#define INITK1 VBROADCASTSS one32x4<>(SB), Y10
#define INITK2 VBROADCASTSS two32x4<>(SB), Y10
#define INITM \
	VPBROADCASTW 2(SI), X10               \
	VCVTPH2PS    X10, Y10                 \
	VBROADCASTSS eighthx4<>(SB), Y9       \
	VMULPS       Y9, Y10, Y10

// ---- Q5_K: Q4_K with a fifth bit per value (qh, 32 bytes at 16, in Y13
// while the chunks run): bit 2j of byte l for value 64j+l, bit 2j+1 for
// value 64j+32+l.
#define Q5KX4FIFTH(shift, dst) \
	VPSRLW $shift, Y13, Y4       \
	VPAND  one8x4<>(SB), Y4, Y4  \
	VPSLLW $4, Y4, Y4            \
	VPOR   Y4, dst, dst

#define Q5KX4CHUNK(qoff, xlo, xhi, slo, shi, blo, bhi) \
	VMOVDQU      qoff(SI), Y1               \
	VPSRLW       $4, Y1, Y2                 \
	VPAND        Y14, Y1, Y1                \
	VPAND        Y14, Y2, Y2                \
	Q5KX4FIFTH(blo, Y1)                     \
	Q5KX4FIFTH(bhi, Y2)                     \
	VPBROADCASTW slo(SP), Y15               \
	Q4KX4HALF(xlo, Y1, (DI), Y9)            \
	Q4KX4HALF(xlo, Y1, (DI)(R14*1), Y10)    \
	Q4KX4HALF(xlo, Y1, (DI)(R14*2), Y11)    \
	Q4KX4HALF(xlo, Y1, (R13), Y12)          \
	VPBROADCASTW shi(SP), Y15               \
	Q4KX4HALF(xhi, Y2, (DI), Y9)            \
	Q4KX4HALF(xhi, Y2, (DI)(R14*1), Y10)    \
	Q4KX4HALF(xhi, Y2, (DI)(R14*2), Y11)    \
	Q4KX4HALF(xhi, Y2, (R13), Y12)

// func dot4RowsQ8_0AVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)
TEXT ·dot4RowsQ8_0AVX2(SB), NOSPLIT, $0-64
	X4ARGS
	VMOVDQU ones16x4<>(SB), Y15

q8x4row:
	X4START

q8x4blk:
	VMOVDQU      2(SI), Y1
	VPSIGNB      Y1, Y1, Y2
	VPBROADCASTW (SI), X5
	VCVTPH2PS    X5, Y5
	Q8X4ROW((DI), Y0)
	Q8X4ROW((DI)(R14*1), Y6)
	Q8X4ROW((DI)(R14*2), Y7)
	Q8X4ROW((R13), Y8)
	ADDQ         $34, SI
	ADDQ         $40, DI
	ADDQ         $40, R13
	DECQ         CX
	JNZ          q8x4blk
	X4END
	JNZ          q8x4row
	VZEROUPPER
	RET

// func dot4RowsMXFP4AVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)
// Q8_0's four-row loop over MXFP4 blocks: the nibbles (IQ4_NL order, after
// the scale byte) looked up in mxfp4x4, the scale e8m0Half[e].
TEXT ·dot4RowsMXFP4AVX2(SB), NOSPLIT, $0-64
	X4ARGS
	VMOVDQU nib4x4<>(SB), Y14
	VMOVDQU ones16x4<>(SB), Y15
	VMOVDQU mxfp4x4<>(SB), Y9
	LEAQ    ·e8m0Half(SB), R12

mx4row:
	X4START

mx4blk:
	VMOVDQU      1(SI), X1
	VPSRLW       $4, X1, X2
	VINSERTI128  $1, X2, Y1, Y1
	VPAND        Y14, Y1, Y1
	VPSHUFB      Y1, Y9, Y1
	VPSIGNB      Y1, Y1, Y2
	MOVBLZX      (SI), AX
	VBROADCASTSS (R12)(AX*4), Y5
	Q8X4ROW((DI), Y0)
	Q8X4ROW((DI)(R14*1), Y6)
	Q8X4ROW((DI)(R14*2), Y7)
	Q8X4ROW((R13), Y8)
	ADDQ         $17, SI
	ADDQ         $40, DI
	ADDQ         $40, R13
	DECQ         CX
	JNZ          mx4blk
	X4END
	JNZ          mx4row
	VZEROUPPER
	RET

// func dot4RowsQ4KAVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)
TEXT ·dot4RowsQ4KAVX2(SB), NOSPLIT, $32-64
	X4ARGS
	VMOVDQU nib4x4<>(SB), Y14

q4kx4row:
	X4START

q4kx4blk:
	Q4KX4SCALES
	KX4ZERO
	Q4KX4CHUNK(16, 36, 68, 0, 2)
	Q4KX4CHUNK(48, 100, 132, 4, 6)
	Q4KX4CHUNK(80, 164, 196, 8, 10)
	Q4KX4CHUNK(112, 228, 260, 12, 14)
	KX4TAILS(0)
	VPBROADCASTW 2(SI), X5
	VCVTPH2PS    X5, Y5
	Q4KX4MIN((DI), Y0)
	Q4KX4MIN((DI)(R14*1), Y6)
	Q4KX4MIN((DI)(R14*2), Y7)
	Q4KX4MIN((R13), Y8)
	ADDQ         $144, SI
	ADDQ         $292, DI
	ADDQ         $292, R13
	DECQ         CX
	JNZ          q4kx4blk
	X4END
	JNZ          q4kx4row
	VZEROUPPER
	RET

// func dot4RowsQ6KAVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)
TEXT ·dot4RowsQ6KAVX2(SB), NOSPLIT, $32-64
	X4ARGS
	VMOVDQU nib4x4<>(SB), Y14

q6kx4row:
	X4START

q6kx4blk:
	VPMOVSXBW 192(SI), Y2
	VMOVDQU   Y2, 0(SP)
	Q6KX4START((DI), Y9)
	Q6KX4START((DI)(R14*1), Y10)
	Q6KX4START((DI)(R14*2), Y11)
	Q6KX4START((R13), Y12)
	Q6KX4HALF(0, 32, 128, 36, 68, 100, 132, 0, 4, 8, 12)
	Q6KX4HALF(64, 96, 160, 164, 196, 228, 260, 16, 20, 24, 28)
	KX4TAILS(208)
	ADDQ         $210, SI
	ADDQ         $292, DI
	ADDQ         $292, R13
	DECQ         CX
	JNZ          q6kx4blk
	X4END
	JNZ          q6kx4row
	VZEROUPPER
	RET

// func dot4RowsQ4_0AVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)
TEXT ·dot4RowsQ4_0AVX2(SB), NOSPLIT, $0-64
	LEGX4(CODESQ4_0, LEGX4OFF, INITK1, 18)

// func dot4RowsQ4_1AVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)
TEXT ·dot4RowsQ4_1AVX2(SB), NOSPLIT, $0-64
	LEGX4(CODESQ4_1, LEGX4MIN, INITM, 20)

// func dot4RowsQ5_0AVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)
TEXT ·dot4RowsQ5_0AVX2(SB), NOSPLIT, $0-64
	LEGX4(CODESQ5_0, LEGX4OFF, INITK2, 22)

// func dot4RowsQ5_1AVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)
TEXT ·dot4RowsQ5_1AVX2(SB), NOSPLIT, $0-64
	LEGX4(CODESQ5_1, LEGX4MIN, INITM, 24)

// func dot4RowsQ5KAVX2(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)
TEXT ·dot4RowsQ5KAVX2(SB), NOSPLIT, $32-64
	X4ARGS
	VMOVDQU nib4x4<>(SB), Y14

q5kx4row:
	X4START

q5kx4blk:
	Q4KX4SCALES
	KX4ZERO
	VMOVDQU      16(SI), Y13
	Q5KX4CHUNK(48, 36, 68, 0, 2, 0, 1)
	Q5KX4CHUNK(80, 100, 132, 4, 6, 2, 3)
	Q5KX4CHUNK(112, 164, 196, 8, 10, 4, 5)
	Q5KX4CHUNK(144, 228, 260, 12, 14, 6, 7)
	KX4TAILS(0)
	VPBROADCASTW 2(SI), X5
	VCVTPH2PS    X5, Y5
	Q4KX4MIN((DI), Y0)
	Q4KX4MIN((DI)(R14*1), Y6)
	Q4KX4MIN((DI)(R14*2), Y7)
	Q4KX4MIN((R13), Y8)
	ADDQ         $176, SI
	ADDQ         $292, DI
	ADDQ         $292, R13
	DECQ         CX
	JNZ          q5kx4blk
	X4END
	JNZ          q5kx4row
	VZEROUPPER
	RET
