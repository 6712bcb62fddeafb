//go:build amd64

#include "textflag.h"

// AVX-512 quantized GEMM kernels: one weight row against eight quantized
// activation rows per pass. Each weight block is loaded, unpacked and its
// scales spread once and then used by eight activation rows, whose int32
// sums stay in Z16–Z23 for the block and whose float sums stay in Z24–Z31
// for the row; sub-block scales are applied with VNNI's VPDPWSSD (products
// of the 16-bit pair sums and the scale words, added in one step).
// Signature (as qdot4_amd64.s's four-row kernels):
//
//	func dot8Rows<F>AVX512(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)
//
// sets out[r + i·os] = row r · activation row i (at x + i·xs bytes) for
// i < 8, r < n; nb ≥ 1 blocks per row. Registers: R8 rb, R9 rows left, R10
// out, R11 row start, R14 xs; SI the weight block, DI, R13 and R12
// activation rows 0, 3 and 5 (the others at DI+xs, DI+2xs, DI+4xs,
// R12+xs, R12+2xs), CX blocks left; AX, BX scratch.

// 64-byte constants (file-local, as in qdot512_amd64.s).
DATA nib4g<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4g<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4g<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4g<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4g<>+32(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4g<>+40(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4g<>+48(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4g<>+56(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL nib4g<>(SB), RODATA|NOPTR, $64

DATA three8g<>+0(SB)/8, $0x0303030303030303
DATA three8g<>+8(SB)/8, $0x0303030303030303
DATA three8g<>+16(SB)/8, $0x0303030303030303
DATA three8g<>+24(SB)/8, $0x0303030303030303
DATA three8g<>+32(SB)/8, $0x0303030303030303
DATA three8g<>+40(SB)/8, $0x0303030303030303
DATA three8g<>+48(SB)/8, $0x0303030303030303
DATA three8g<>+56(SB)/8, $0x0303030303030303
GLOBL three8g<>(SB), RODATA|NOPTR, $64

// quadshufg spreads word i of each qword over 128-bit lane i: four
// consecutive 16-value sub-block scales over a vector of 64 products.
DATA quadshufg<>+0(SB)/8, $0x0100010001000100
DATA quadshufg<>+8(SB)/8, $0x0100010001000100
DATA quadshufg<>+16(SB)/8, $0x0302030203020302
DATA quadshufg<>+24(SB)/8, $0x0302030203020302
DATA quadshufg<>+32(SB)/8, $0x0504050405040504
DATA quadshufg<>+40(SB)/8, $0x0504050405040504
DATA quadshufg<>+48(SB)/8, $0x0706070607060706
DATA quadshufg<>+56(SB)/8, $0x0706070607060706
GLOBL quadshufg<>(SB), RODATA|NOPTR, $64

// halfshufg spreads word 0 of each dword over the low 256 bits and word 1
// over the high 256: two 32-value sub-block scales over 64 products.
DATA halfshufg<>+0(SB)/8, $0x0100010001000100
DATA halfshufg<>+8(SB)/8, $0x0100010001000100
DATA halfshufg<>+16(SB)/8, $0x0100010001000100
DATA halfshufg<>+24(SB)/8, $0x0100010001000100
DATA halfshufg<>+32(SB)/8, $0x0302030203020302
DATA halfshufg<>+40(SB)/8, $0x0302030203020302
DATA halfshufg<>+48(SB)/8, $0x0302030203020302
DATA halfshufg<>+56(SB)/8, $0x0302030203020302
GLOBL halfshufg<>(SB), RODATA|NOPTR, $64

#define X8ARGS \
	MOVQ w+0(FP), R11   \
	MOVQ rb+8(FP), R8   \
	MOVQ n+16(FP), R9   \
	MOVQ xs+32(FP), R14 \
	MOVQ out+48(FP), R10

#define X8START \
	MOVQ   R11, SI           \
	MOVQ   x+24(FP), DI      \
	LEAQ   (DI)(R14*2), R13  \
	ADDQ   R14, R13          \
	LEAQ   (R13)(R14*2), R12 \
	MOVQ   nb+40(FP), CX     \
	VPXORD Z24, Z24, Z24     \
	VPXORD Z25, Z25, Z25     \
	VPXORD Z26, Z26, Z26     \
	VPXORD Z27, Z27, Z27     \
	VPXORD Z28, Z28, Z28     \
	VPXORD Z29, Z29, Z29     \
	VPXORD Z30, Z30, Z30     \
	VPXORD Z31, Z31, Z31

// X8NEXT moves to the next block: bsize weight bytes, one q8KBlock (292
// bytes) per activation row.
#define X8NEXT(bsize) \
	ADDQ $bsize, SI \
	ADDQ $292, DI   \
	ADDQ $292, R13  \
	ADDQ $292, R12  \
	DECQ CX

// ROWS8(M, a, b) runs M(a, b, row address, int sum, float sum) for each
// of the eight activation rows.
#define ROWS8(M, a, b) \
	M(a, b, (DI), Z16, Z24)          \
	M(a, b, (DI)(R14*1), Z17, Z25)   \
	M(a, b, (DI)(R14*2), Z18, Z26)   \
	M(a, b, (R13), Z19, Z27)         \
	M(a, b, (DI)(R14*4), Z20, Z28)   \
	M(a, b, (R12), Z21, Z29)         \
	M(a, b, (R12)(R14*1), Z22, Z30)  \
	M(a, b, (R12)(R14*2), Z23, Z31)

// X8END reduces the eight float sums and stores them os apart from (R10),
// then moves to the next weight row.
#define X8END \
	VEXTRACTF64X4 $1, Z24, Y0  \
	VADDPS        Y24, Y0, Y0  \
	VEXTRACTF64X4 $1, Z25, Y1  \
	VADDPS        Y25, Y1, Y1  \
	VEXTRACTF64X4 $1, Z26, Y2  \
	VADDPS        Y26, Y2, Y2  \
	VEXTRACTF64X4 $1, Z27, Y3  \
	VADDPS        Y27, Y3, Y3  \
	VEXTRACTF64X4 $1, Z28, Y4  \
	VADDPS        Y28, Y4, Y4  \
	VEXTRACTF64X4 $1, Z29, Y5  \
	VADDPS        Y29, Y5, Y5  \
	VEXTRACTF64X4 $1, Z30, Y6  \
	VADDPS        Y30, Y6, Y6  \
	VEXTRACTF64X4 $1, Z31, Y7  \
	VADDPS        Y31, Y7, Y7  \
	VHADDPS       Y1, Y0, Y0   \
	VHADDPS       Y3, Y2, Y2   \
	VHADDPS       Y5, Y4, Y4   \
	VHADDPS       Y7, Y6, Y6   \
	VHADDPS       Y2, Y0, Y0   \
	VHADDPS       Y6, Y4, Y4   \
	VEXTRACTF128  $1, Y0, X1   \
	VADDPS        X1, X0, X0   \
	VEXTRACTF128  $1, Y4, X5   \
	VADDPS        X5, X4, X4   \
	MOVQ          R10, AX      \
	MOVQ          os+56(FP), BX \
	SHLQ          $2, BX       \
	VMOVSS        X0, (AX)     \
	ADDQ          BX, AX       \
	VEXTRACTPS    $1, X0, (AX) \
	ADDQ          BX, AX       \
	VEXTRACTPS    $2, X0, (AX) \
	ADDQ          BX, AX       \
	VEXTRACTPS    $3, X0, (AX) \
	ADDQ          BX, AX       \
	VMOVSS        X4, (AX)     \
	ADDQ          BX, AX       \
	VEXTRACTPS    $1, X4, (AX) \
	ADDQ          BX, AX       \
	VEXTRACTPS    $2, X4, (AX) \
	ADDQ          BX, AX       \
	VEXTRACTPS    $3, X4, (AX) \
	ADDQ          $4, R10      \
	ADDQ          R8, R11      \
	DECQ          R9

// Q4_K/Q5_K scale unpacking in one 16-byte vector (qdot512_amd64.s's
// K4UNPACKz, file-local constants).
DATA k4shufPg<>+0(SB)/8, $0x0b0a090803020100
DATA k4shufPg<>+8(SB)/8, $0x0b0a090807060504
GLOBL k4shufPg<>(SB), RODATA|NOPTR, $16
DATA k4shufQg<>+0(SB)/8, $0x0302010080808080
DATA k4shufQg<>+8(SB)/8, $0x0706050480808080
GLOBL k4shufQg<>(SB), RODATA|NOPTR, $16
DATA k4maskAg<>+0(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA k4maskAg<>+8(SB)/8, $0x000000003f3f3f3f
GLOBL k4maskAg<>(SB), RODATA|NOPTR, $16
DATA k4maskBg<>+0(SB)/8, $0x0000000000000000
DATA k4maskBg<>+8(SB)/8, $0x0f0f0f0f00000000
GLOBL k4maskBg<>(SB), RODATA|NOPTR, $16
DATA k4hig<>+0(SB)/8, $0x3030303030303030
DATA k4hig<>+8(SB)/8, $0x3030303030303030
GLOBL k4hig<>(SB), RODATA|NOPTR, $16

// K4UNPACKg leaves the 8 scales and 8 minimums of the Q4_K block at SI as
// 16 words in Y4 (scales in the low lane); X5–X7 are clobbered.
#define K4UNPACKg \
	VMOVDQU   4(SI), X4             \
	VPSHUFB   k4shufPg<>(SB), X4, X5 \
	VPSHUFB   k4shufQg<>(SB), X4, X6 \
	VPSRLW    $4, X5, X7            \
	VPAND     k4maskBg<>(SB), X7, X7 \
	VPAND     k4maskAg<>(SB), X5, X5 \
	VPOR      X7, X5, X5            \
	VPSRLW    $2, X6, X6            \
	VPAND     k4hig<>(SB), X6, X6    \
	VPOR      X6, X5, X5            \
	VPMOVZXBW X5, Y4

// Q4K8CODES(qoff, soff): chunk j's 64 codes (32 nibble bytes at qoff: low
// nibbles, then high — contiguous in x) into Z1, its two scale words (at
// soff(SP)) spread over Z4.
#define Q4K8CODES(qoff, soff) \
	VMOVDQU      qoff(SI), Y1   \
	VPSRLW       $4, Y1, Y2     \
	VINSERTI64X4 $1, Y2, Z1, Z1 \
	VPANDD       Z14, Z1, Z1    \
	VPBROADCASTD soff(SP), Z4   \
	VPSHUFB      Z10, Z4, Z4

// Q4K8FIRST and Q4K8NEXT: one activation row's products with Z1's codes,
// scaled by Z4's words, starting (FIRST) or adding to the block's sum.
#define Q4K8FIRST(xoff, unused, xr, isum, acc) \
	VPMADDUBSW xoff xr, Z1, Z8 \
	VPMADDWD   Z4, Z8, isum

#define Q4K8NEXT(xoff, unused, xr, isum, acc) \
	VPMADDUBSW xoff xr, Z1, Z8 \
	VPDPWSSD   Z4, Z8, isum

// Q4K8TAIL: acc += d_x·(d·isum − d_min·Σ m·bsums) for one activation row;
// Z5 holds the eight minimum words, each twice (its two 16-value bsums),
// in its low 256 bits and zeros above (so the 64-byte load past bsums
// adds nothing), Z6 d and Z7 d_min in every lane.
#define Q4K8TAIL(unused1, unused2, xr, isum, acc) \
	VPMADDWD         4 xr, Z5, Z8 \
	VCVTDQ2PS        Z8, Z8       \
	VCVTDQ2PS        isum, Z9     \
	VMULPS           Z6, Z9, Z9   \
	VFNMADD231PS     Z7, Z8, Z9   \
	VFMADD231PS.BCST xr, Z9, acc

// func dot8RowsQ4KAVX512(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)
TEXT ·dot8RowsQ4KAVX512(SB), NOSPLIT, $16-64
	X8ARGS
	VMOVDQU64 nib4g<>(SB), Z14
	VMOVDQU64 halfshufg<>(SB), Z10

q4krow:
	X8START

q4kblk:
	K4UNPACKg
	VMOVDQU      X4, 0(SP)
	VEXTRACTI128 $1, Y4, X5
	VPMOVZXWD    X5, Y5
	VPSLLD       $16, Y5, Y8
	VPOR         Y8, Y5, Y5
	VPBROADCASTW 0(SI), Y6
	VCVTPH2PS    Y6, Z6
	VPBROADCASTW 2(SI), Y7
	VCVTPH2PS    Y7, Z7
	Q4K8CODES(16, 0)
	ROWS8(Q4K8FIRST, 36, 0)
	Q4K8CODES(48, 4)
	ROWS8(Q4K8NEXT, 100, 0)
	Q4K8CODES(80, 8)
	ROWS8(Q4K8NEXT, 164, 0)
	Q4K8CODES(112, 12)
	ROWS8(Q4K8NEXT, 228, 0)
	ROWS8(Q4K8TAIL, 0, 0)
	X8NEXT(144)
	JNZ q4kblk
	X8END
	JNZ q4krow
	VZEROUPPER
	RET

// Q6K8CODES(ql, qh, slo, shi): 128 values of one Q6_K half as unsigned
// 6-bit codes (the stored q + 32): values 0–63 into Z2, 64–127 into Z1,
// their sub-block scale words (four per vector, one per 128-bit lane, at
// slo(SP) and shi(SP)) spread over Z4 and Z5.
#define Q6K8CODES(ql, qh, slo, shi) \
	VMOVDQU64    ql(SI), Z1     \
	VMOVDQU      qh(SI), Y8     \
	VPSRLW       $2, Y8, Y3     \
	VINSERTI64X4 $1, Y3, Z8, Z3 \
	VPSRLW       $4, Y8, Y9     \
	VPSRLW       $6, Y8, Y8     \
	VINSERTI64X4 $1, Y8, Z9, Z9 \
	VPANDD       Z12, Z3, Z3    \
	VPSLLW       $4, Z3, Z3     \
	VPANDD       Z12, Z9, Z9    \
	VPSLLW       $4, Z9, Z9     \
	VPANDD       Z14, Z1, Z2    \
	VPSRLW       $4, Z1, Z1     \
	VPANDD       Z14, Z1, Z1    \
	VPORD        Z3, Z2, Z2     \
	VPORD        Z9, Z1, Z1     \
	VPBROADCASTQ slo(SP), Z4    \
	VPSHUFB      Z11, Z4, Z4    \
	VPBROADCASTQ shi(SP), Z5    \
	VPSHUFB      Z11, Z5, Z5

// Q6K8FIRST: isum = −32·Σ scale·bsums for one activation row (the codes'
// offset), from Z6's negated scale words (zeros above 256 bits).
#define Q6K8FIRST(unused1, unused2, xr, isum, acc) \
	VPMADDWD 4 xr, Z6, isum

#define Q6K8HALF(xlo, xhi, xr, isum, acc) \
	VPMADDUBSW xlo xr, Z2, Z8 \
	VPDPWSSD   Z4, Z8, isum   \
	VPMADDUBSW xhi xr, Z1, Z8 \
	VPDPWSSD   Z5, Z8, isum

// Q6K8TAIL: acc += d_x·d·isum, d in every lane of Z13.
#define Q6K8TAIL(unused1, unused2, xr, isum, acc) \
	VCVTDQ2PS        isum, Z9   \
	VMULPS           Z13, Z9, Z9 \
	VFMADD231PS.BCST xr, Z9, acc

// func dot8RowsQ6KAVX512(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)
TEXT ·dot8RowsQ6KAVX512(SB), NOSPLIT, $32-64
	X8ARGS
	VMOVDQU64 nib4g<>(SB), Z14
	VMOVDQU64 three8g<>(SB), Z12
	VMOVDQU64 quadshufg<>(SB), Z11

q6krow:
	X8START

q6kblk:
	VPMOVSXBW    192(SI), Y5
	VMOVDQU      Y5, 0(SP)
	VPSLLW       $5, Y5, Y6
	VPXOR        Y7, Y7, Y7
	VPSUBW       Y6, Y7, Y6
	VPBROADCASTW 208(SI), Y7
	VCVTPH2PS    Y7, Z13
	ROWS8(Q6K8FIRST, 0, 0)
	Q6K8CODES(0, 128, 0, 8)
	ROWS8(Q6K8HALF, 36, 100)
	Q6K8CODES(64, 160, 16, 24)
	ROWS8(Q6K8HALF, 164, 228)
	ROWS8(Q6K8TAIL, 0, 0)
	X8NEXT(210)
	JNZ q6kblk
	X8END
	JNZ q6krow
	VZEROUPPER
	RET
