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

// shift4g: word shift counts 0 below 256 bits, 4 above (low nibbles of
// 32 bytes, then their high nibbles).
DATA shift4g<>+0(SB)/8, $0
DATA shift4g<>+8(SB)/8, $0
DATA shift4g<>+16(SB)/8, $0
DATA shift4g<>+24(SB)/8, $0
DATA shift4g<>+32(SB)/8, $0x0004000400040004
DATA shift4g<>+40(SB)/8, $0x0004000400040004
DATA shift4g<>+48(SB)/8, $0x0004000400040004
DATA shift4g<>+56(SB)/8, $0x0004000400040004
GLOBL shift4g<>(SB), RODATA|NOPTR, $64

// pick4g: for chunk j (64 bytes each), word index 2j below 256 bits and
// 2j+1 above (VPERMW picks sub-block scales 2j and 2j+1).
DATA pick4g<>+0(SB)/8, $0x0000000000000000
DATA pick4g<>+8(SB)/8, $0x0000000000000000
DATA pick4g<>+16(SB)/8, $0x0000000000000000
DATA pick4g<>+24(SB)/8, $0x0000000000000000
DATA pick4g<>+32(SB)/8, $0x0001000100010001
DATA pick4g<>+40(SB)/8, $0x0001000100010001
DATA pick4g<>+48(SB)/8, $0x0001000100010001
DATA pick4g<>+56(SB)/8, $0x0001000100010001
DATA pick4g<>+64(SB)/8, $0x0002000200020002
DATA pick4g<>+72(SB)/8, $0x0002000200020002
DATA pick4g<>+80(SB)/8, $0x0002000200020002
DATA pick4g<>+88(SB)/8, $0x0002000200020002
DATA pick4g<>+96(SB)/8, $0x0003000300030003
DATA pick4g<>+104(SB)/8, $0x0003000300030003
DATA pick4g<>+112(SB)/8, $0x0003000300030003
DATA pick4g<>+120(SB)/8, $0x0003000300030003
DATA pick4g<>+128(SB)/8, $0x0004000400040004
DATA pick4g<>+136(SB)/8, $0x0004000400040004
DATA pick4g<>+144(SB)/8, $0x0004000400040004
DATA pick4g<>+152(SB)/8, $0x0004000400040004
DATA pick4g<>+160(SB)/8, $0x0005000500050005
DATA pick4g<>+168(SB)/8, $0x0005000500050005
DATA pick4g<>+176(SB)/8, $0x0005000500050005
DATA pick4g<>+184(SB)/8, $0x0005000500050005
DATA pick4g<>+192(SB)/8, $0x0006000600060006
DATA pick4g<>+200(SB)/8, $0x0006000600060006
DATA pick4g<>+208(SB)/8, $0x0006000600060006
DATA pick4g<>+216(SB)/8, $0x0006000600060006
DATA pick4g<>+224(SB)/8, $0x0007000700070007
DATA pick4g<>+232(SB)/8, $0x0007000700070007
DATA pick4g<>+240(SB)/8, $0x0007000700070007
DATA pick4g<>+248(SB)/8, $0x0007000700070007
GLOBL pick4g<>(SB), RODATA|NOPTR, $256

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

// X8STORE reduces eight float sums (given as Z and Y names) and stores
// them os (BX, in bytes) apart from off(R10).
#define X8STORE(z0, y0, z1, y1, z2, y2, z3, y3, z4, y4, z5, y5, z6, y6, z7, y7, off) \
	VEXTRACTF64X4 $1, z0, Y0  \
	VADDPS        y0, Y0, Y0  \
	VEXTRACTF64X4 $1, z1, Y1  \
	VADDPS        y1, Y1, Y1  \
	VEXTRACTF64X4 $1, z2, Y2  \
	VADDPS        y2, Y2, Y2  \
	VEXTRACTF64X4 $1, z3, Y3  \
	VADDPS        y3, Y3, Y3  \
	VEXTRACTF64X4 $1, z4, Y4  \
	VADDPS        y4, Y4, Y4  \
	VEXTRACTF64X4 $1, z5, Y5  \
	VADDPS        y5, Y5, Y5  \
	VEXTRACTF64X4 $1, z6, Y6  \
	VADDPS        y6, Y6, Y6  \
	VEXTRACTF64X4 $1, z7, Y7  \
	VADDPS        y7, Y7, Y7  \
	VHADDPS       Y1, Y0, Y0  \
	VHADDPS       Y3, Y2, Y2  \
	VHADDPS       Y5, Y4, Y4  \
	VHADDPS       Y7, Y6, Y6  \
	VHADDPS       Y2, Y0, Y0  \
	VHADDPS       Y6, Y4, Y4  \
	VEXTRACTF128  $1, Y0, X1  \
	VADDPS        X1, X0, X0  \
	VEXTRACTF128  $1, Y4, X5  \
	VADDPS        X5, X4, X4  \
	LEAQ          off(R10), AX \
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
	VEXTRACTPS    $3, X4, (AX)

// X8END stores the eight float sums Z24–Z31 (X8STORE) and moves to the
// next weight row.
#define X8END \
	MOVQ os+56(FP), BX \
	SHLQ $2, BX        \
	X8STORE(Z24, Y24, Z25, Y25, Z26, Y26, Z27, Y27, Z28, Y28, Z29, Y29, Z30, Y30, Z31, Y31, 0) \
	ADDQ $4, R10       \
	ADDQ R8, R11       \
	DECQ R9

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

// Q4K8CODES(qoff, idx): chunk j's 64 codes (32 nibble bytes at qoff: low
// nibbles, then high — contiguous in x) into Z1 (the bytes in both halves,
// the upper half's words shifted right by 4 by Z15's counts), its two
// scale words picked from Z3's sixteen by idx (words 2j below 256 bits,
// 2j+1 above) into Z4.
#define Q4K8CODES(qoff, idx) \
	VBROADCASTI64X4 qoff(SI), Z1 \
	VPSRLVW         Z15, Z1, Z1  \
	VPANDD          Z14, Z1, Z1  \
	VPERMW          Z3, idx, Z4

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
TEXT ·dot8RowsQ4KAVX512(SB), NOSPLIT, $0-64
	X8ARGS
	VMOVDQU64 nib4g<>(SB), Z14
	VMOVDQU64 shift4g<>(SB), Z15
	VMOVDQU64 pick4g<>+0(SB), Z10
	VMOVDQU64 pick4g<>+64(SB), Z11
	VMOVDQU64 pick4g<>+128(SB), Z12
	VMOVDQU64 pick4g<>+192(SB), Z13

q4krow:
	X8START

q4kblk:
	K4UNPACKg
	VMOVDQA64    Z4, Z3
	VEXTRACTI128 $1, Y4, X5
	VPMOVZXWD    X5, Y5
	VPSLLD       $16, Y5, Y8
	VPOR         Y8, Y5, Y5
	VPBROADCASTW 0(SI), Y6
	VCVTPH2PS    Y6, Z6
	VPBROADCASTW 2(SI), Y7
	VCVTPH2PS    Y7, Z7
	Q4K8CODES(16, Z10)
	ROWS8(Q4K8FIRST, 36, 0)
	Q4K8CODES(48, Z11)
	ROWS8(Q4K8NEXT, 100, 0)
	Q4K8CODES(80, Z12)
	ROWS8(Q4K8NEXT, 164, 0)
	Q4K8CODES(112, Z13)
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

DATA hex80g<>+0(SB)/8, $0x8080808080808080
DATA hex80g<>+8(SB)/8, $0x8080808080808080
DATA hex80g<>+16(SB)/8, $0x8080808080808080
DATA hex80g<>+24(SB)/8, $0x8080808080808080
DATA hex80g<>+32(SB)/8, $0x8080808080808080
DATA hex80g<>+40(SB)/8, $0x8080808080808080
DATA hex80g<>+48(SB)/8, $0x8080808080808080
DATA hex80g<>+56(SB)/8, $0x8080808080808080
GLOBL hex80g<>(SB), RODATA|NOPTR, $64

// Q8_0 takes weight rows in pairs (A at SI, B at SI+rb), two blocks (64
// values) per step, each activation row's codes made unsigned once
// (x+128, a flip of the top bit) and shared by both weight rows:
// VPDPBUSD(x+128, w) = Σ x·w + 128·Σ w, so each pair's int32 sums start
// from −128·Σ w (per weight row, made once per step) and are exact.
// Row A's float sums are Z16–Z23, row B's Z24–Z31; Z15 holds 0x80 bytes,
// Z14 zero, K1 the upper eight lanes.

// Q8WSIDE(wr, codes, negc, dw): the weight row's 64 codes, −128·Σ w per
// four codes, and [d_A ×8 | d_B ×8].
#define Q8WSIDE(wr, codes, negc, dw, xdw, ydw) \
	VMOVDQU      2 wr, Y10               \
	VINSERTI64X4 $1, 36 wr, Z10, codes   \
	VPXORD       negc, negc, negc        \
	VPDPBUSD     codes, Z15, negc        \
	VPSUBD       negc, Z14, negc         \
	VPBROADCASTW wr, X11                 \
	VPBROADCASTW 34 wr, X12              \
	VINSERTI128  $1, X12, Y11, Y11       \
	VCVTPH2PS    Y11, dw

// Q8PAIR: acc += d_w·d_x·(Σ x·w) for one weight row and one activation
// row's two blocks (x+128 in Z6, [d_xA ×8 | d_xB ×8] in Z7).
#define Q8PAIR(codes, negc, dw, acc) \
	VMOVDQA64   negc, Z8    \
	VPDPBUSD    codes, Z6, Z8 \
	VCVTDQ2PS   Z8, Z8      \
	VMULPS      Z7, dw, Z9  \
	VFMADD231PS Z9, Z8, acc

#define Q8ROW(xr, accA, accB) \
	VMOVDQU      8 xr, Y6               \
	VINSERTI64X4 $1, 48 xr, Z6, Z6      \
	VPXORD       Z15, Z6, Z6            \
	VBROADCASTSS xr, Z7                 \
	VBROADCASTSS 40 xr, K1, Z7          \
	Q8PAIR(Z0, Z1, Z2, accA)            \
	Q8PAIR(Z3, Z4, Z5, accB)

// Q8TAILROW: one last block on 256-bit vectors (upper lanes zero, so the
// 512-bit FMA leaves the sums' upper lanes as they are).
#define Q8TAILPAIR(codes, negc, dw, acc) \
	VMOVDQA64   negc, Y8      \
	VPDPBUSD    codes, Y6, Y8 \
	VCVTDQ2PS   Y8, Y8        \
	VMULPS      Y7, dw, Y9    \
	VFMADD231PS Z9, Z8, acc

#define Q8TAILROW(xr, accA, accB) \
	VMOVDQU      8 xr, Y6          \
	VPXORD       Y15, Y6, Y6       \
	VBROADCASTSS xr, Y7            \
	Q8TAILPAIR(Y0, Y1, Y2, accA)   \
	Q8TAILPAIR(Y3, Y4, Y5, accB)

#define Q8TAILW(wr, codes, negc, dw) \
	VMOVDQU      2 wr, codes      \
	VPXORD       negc, negc, negc \
	VPDPBUSD     codes, Y15, negc \
	VPSUBD       negc, Y14, negc  \
	VPBROADCASTW wr, X11          \
	VCVTPH2PS    X11, dw

#define Q8ROWS8(M) \
	M((DI), Z16, Z24)         \
	M((DI)(R14*1), Z17, Z25)  \
	M((DI)(R14*2), Z18, Z26)  \
	M((R13), Z19, Z27)        \
	M((DI)(R14*4), Z20, Z28)  \
	M((R12), Z21, Z29)        \
	M((R12)(R14*1), Z22, Z30) \
	M((R12)(R14*2), Z23, Z31)

// QPAIRS8(wside, tailw, bsize) is the pair-of-weight-rows kernel body:
// wside(wr, codes, negc, dw) makes one weight row's two-block vectors
// (signed codes, −128·Σ w per four codes, [d_A ×8 | d_B ×8]), tailw the
// same for one last block on 256-bit vectors; bsize is the block's bytes.
#define QPAIRS8(wside, tailw, bsize) \
	X8ARGS                                 \
	VMOVDQU64 hex80g<>(SB), Z15            \
	VPXORD    Z14, Z14, Z14                \
	MOVL      $0xff00, AX                  \
	KMOVW     AX, K1                       \
qprow:                                     \
	X8START                                \
	VPXORD Z16, Z16, Z16                   \
	VPXORD Z17, Z17, Z17                   \
	VPXORD Z18, Z18, Z18                   \
	VPXORD Z19, Z19, Z19                   \
	VPXORD Z20, Z20, Z20                   \
	VPXORD Z21, Z21, Z21                   \
	VPXORD Z22, Z22, Z22                   \
	VPXORD Z23, Z23, Z23                   \
qppair:                                    \
	CMPQ CX, $2                            \
	JL   qptail                            \
	wside((SI), Z0, Z1, Z2)                \
	wside((SI)(R8*1), Z3, Z4, Z5)          \
	Q8ROWS8(Q8ROW)                         \
	ADDQ $(2*bsize), SI                    \
	ADDQ $80, DI                           \
	ADDQ $80, R13                          \
	ADDQ $80, R12                          \
	SUBQ $2, CX                            \
	JMP  qppair                            \
qptail:                                    \
	TESTQ CX, CX                           \
	JZ    qpdone                           \
	tailw((SI), Y0, Y1, Y2)                \
	tailw((SI)(R8*1), Y3, Y4, Y5)          \
	Q8ROWS8(Q8TAILROW)                     \
qpdone:                                    \
	MOVQ os+56(FP), BX                     \
	SHLQ $2, BX                            \
	X8STORE(Z16, Y16, Z17, Y17, Z18, Y18, Z19, Y19, Z20, Y20, Z21, Y21, Z22, Y22, Z23, Y23, 0) \
	X8STORE(Z24, Y24, Z25, Y25, Z26, Y26, Z27, Y27, Z28, Y28, Z29, Y29, Z30, Y30, Z31, Y31, 4) \
	ADDQ $8, R10                           \
	LEAQ (R11)(R8*2), R11                  \
	SUBQ $2, R9                            \
	JNZ  qprow                             \
	VZEROUPPER                             \
	RET

#define Q8W(wr, codes, negc, dw) Q8WSIDE(wr, codes, negc, dw, X0, Y0)

// func dot8RowsQ8_0AVX512(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)
// n must be even (weight rows in pairs).
TEXT ·dot8RowsQ8_0AVX512(SB), NOSPLIT, $0-64
	QPAIRS8(Q8W, Q8TAILW, 34)

// Q5_0 (22-byte blocks: d, 32 fifth bits, 16 nibble bytes: values j and
// j+16 in byte j's low and high nibble) runs the same pair kernel on its
// codes made signed: nibbles − 16, plus 16 where the fifth bit is set (a
// mask register loaded from the two blocks' qh words).
DATA cnt5g<>+0(SB)/8, $0
DATA cnt5g<>+8(SB)/8, $0
DATA cnt5g<>+16(SB)/8, $0x0004000400040004
DATA cnt5g<>+24(SB)/8, $0x0004000400040004
DATA cnt5g<>+32(SB)/8, $0
DATA cnt5g<>+40(SB)/8, $0
DATA cnt5g<>+48(SB)/8, $0x0004000400040004
DATA cnt5g<>+56(SB)/8, $0x0004000400040004
GLOBL cnt5g<>(SB), RODATA|NOPTR, $64

DATA hex10g<>+0(SB)/8, $0x1010101010101010
DATA hex10g<>+8(SB)/8, $0x1010101010101010
DATA hex10g<>+16(SB)/8, $0x1010101010101010
DATA hex10g<>+24(SB)/8, $0x1010101010101010
DATA hex10g<>+32(SB)/8, $0x1010101010101010
DATA hex10g<>+40(SB)/8, $0x1010101010101010
DATA hex10g<>+48(SB)/8, $0x1010101010101010
DATA hex10g<>+56(SB)/8, $0x1010101010101010
GLOBL hex10g<>(SB), RODATA|NOPTR, $64

#define Q50W(wr, codes, negc, dw) \
	VBROADCASTI32X4 6 wr, Z10             \
	VINSERTI32X4    $2, 28 wr, Z10, Z10   \
	VINSERTI32X4    $3, 28 wr, Z10, Z10   \
	VPSRLVW         cnt5g<>(SB), Z10, Z10 \
	VPANDD          nib4g<>(SB), Z10, Z10 \
	VPSUBB          hex10g<>(SB), Z10, codes \
	MOVL            2 wr, AX              \
	MOVL            24 wr, DX             \
	SHLQ            $32, DX               \
	ORQ             DX, AX                \
	KMOVQ           AX, K2                \
	VPADDB          hex10g<>(SB), codes, K2, codes \
	VPXORD          negc, negc, negc      \
	VPDPBUSD        codes, Z15, negc      \
	VPSUBD          negc, Z14, negc       \
	VPBROADCASTW    wr, X11               \
	VPBROADCASTW    22 wr, X12            \
	VINSERTI128     $1, X12, Y11, Y11     \
	VCVTPH2PS       Y11, dw

#define Q50TAILW(wr, codes, negc, dw) \
	VMOVDQU      6 wr, X10                   \
	VPSRLW       $4, X10, X11                \
	VINSERTI128  $1, X11, Y10, Y10           \
	VPAND        nib4g<>(SB), Y10, Y10       \
	VPSUBB       hex10g<>(SB), Y10, codes    \
	MOVL         2 wr, AX                    \
	KMOVD        AX, K2                      \
	VPADDB       hex10g<>(SB), codes, K2, codes \
	VPXORD       negc, negc, negc            \
	VPDPBUSD     codes, Y15, negc            \
	VPSUBD       negc, Y14, negc             \
	VPBROADCASTW wr, X11                     \
	VCVTPH2PS    X11, dw

// func dot8RowsQ5_0AVX512(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)
// n must be even (weight rows in pairs).
TEXT ·dot8RowsQ5_0AVX512(SB), NOSPLIT, $0-64
	QPAIRS8(Q50W, Q50TAILW, 22)

// MXFP4 (17-byte blocks: the E8M0 scale byte, then 16 nibble bytes:
// values j and j+16 in byte j's low and high nibble) runs the same pair
// kernel on its codes looked up (VPSHUFB) in mxfp4g, the doubled E2M1
// values of kvaluesMXFP4, with the block's float scale e8m0Half[e] (the
// halved E8M0 value) for the activation's d to multiply, as
// dotRowsMXFP4AVX512 does: the integer sums are the generic path's. Z13
// holds mxfp4g.
DATA mxfp4g<>+0(SB)/8, $0x0c08060403020100
DATA mxfp4g<>+8(SB)/8, $0xf4f8fafcfdfeff00
DATA mxfp4g<>+16(SB)/8, $0x0c08060403020100
DATA mxfp4g<>+24(SB)/8, $0xf4f8fafcfdfeff00
DATA mxfp4g<>+32(SB)/8, $0x0c08060403020100
DATA mxfp4g<>+40(SB)/8, $0xf4f8fafcfdfeff00
DATA mxfp4g<>+48(SB)/8, $0x0c08060403020100
DATA mxfp4g<>+56(SB)/8, $0xf4f8fafcfdfeff00
GLOBL mxfp4g<>(SB), RODATA|NOPTR, $64

// MXW: both blocks' nibble bytes in 128-bit lanes 0–1 (block A) and 2–3
// (block B), the odd lanes shifted right by 4 (cnt5g), masked, looked up.
#define MXW(wr, codes, negc, dw) \
	VBROADCASTI32X4 1 wr, Z10             \
	VINSERTI32X4    $2, 18 wr, Z10, Z10   \
	VINSERTI32X4    $3, 18 wr, Z10, Z10   \
	VPSRLVW         cnt5g<>(SB), Z10, Z10 \
	VPANDD          nib4g<>(SB), Z10, Z10 \
	VPSHUFB         Z10, Z13, codes       \
	VPXORD          negc, negc, negc      \
	VPDPBUSD        codes, Z15, negc      \
	VPSUBD          negc, Z14, negc       \
	MOVBLZX         wr, AX                \
	MOVBLZX         17 wr, DX             \
	LEAQ            ·e8m0Half(SB), BX     \
	VBROADCASTSS    (BX)(AX*4), Y11       \
	VBROADCASTSS    (BX)(DX*4), Y12       \
	VINSERTF64X4    $1, Y12, Z11, dw

#define MXTAILW(wr, codes, negc, dw) \
	VMOVDQU      1 wr, X10               \
	VPSRLW       $4, X10, X11            \
	VINSERTI128  $1, X11, Y10, Y10       \
	VPAND        nib4g<>(SB), Y10, Y10   \
	VPSHUFB      Y10, Y13, codes         \
	VPXORD       negc, negc, negc        \
	VPDPBUSD     codes, Y15, negc        \
	VPSUBD       negc, Y14, negc         \
	MOVBLZX      wr, AX                  \
	LEAQ         ·e8m0Half(SB), BX       \
	VBROADCASTSS (BX)(AX*4), dw

// func dot8RowsMXFP4AVX512(w *byte, rb, n int, x *byte, xs, nb int, out *float32, os int)
// n must be even (weight rows in pairs).
TEXT ·dot8RowsMXFP4AVX512(SB), NOSPLIT, $0-64
	VMOVDQU64 mxfp4g<>(SB), Z13
	QPAIRS8(MXW, MXTAILW, 17)
