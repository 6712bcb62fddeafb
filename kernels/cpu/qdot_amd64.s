//go:build amd64

#include "textflag.h"

// AVX2 integer dot products of quantized weight rows with one quantized
// activation row (qact.go), one kernel per format. Every kernel has the
// signature
//
//	func dotRows<F>AVX2(w *byte, rb, n int, x *byte, nb int, out *float32)
//
// and sets out[r] = row r · x for n ≥ 1 rows of nb ≥ 1 blocks, row r at
// w + r·rb. Codes are widened to bytes in registers; VPMADDUBSW multiplies
// unsigned weight codes (or |w| with x's signs flipped, for signed codes)
// by the signed activation bytes into int16 pairs that cannot saturate
// (at most 2·63·127 for 6-bit codes, 2·128·127 for signed 8-bit ones),
// VPMADDWD widens them to int32 (times the sub-block scale for the
// K-quants), and the float scales are applied once per block, as in GGML.
// Register use: R8 rb, R9 rows left, R10 out, R11 row start, SI the weight
// block, DI the activation block, CX blocks left; AX, BX, DX, R12, R13 are
// scratch. Go assembler operand order: sources first, destination last.

// 32-byte constants.
DATA nib4<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL nib4<>(SB), RODATA|NOPTR, $32

DATA ones16<>+0(SB)/8, $0x0001000100010001
DATA ones16<>+8(SB)/8, $0x0001000100010001
DATA ones16<>+16(SB)/8, $0x0001000100010001
DATA ones16<>+24(SB)/8, $0x0001000100010001
GLOBL ones16<>(SB), RODATA|NOPTR, $32

DATA three8<>+0(SB)/8, $0x0303030303030303
DATA three8<>+8(SB)/8, $0x0303030303030303
DATA three8<>+16(SB)/8, $0x0303030303030303
DATA three8<>+24(SB)/8, $0x0303030303030303
GLOBL three8<>(SB), RODATA|NOPTR, $32

DATA one8<>+0(SB)/8, $0x0101010101010101
DATA one8<>+8(SB)/8, $0x0101010101010101
DATA one8<>+16(SB)/8, $0x0101010101010101
DATA one8<>+24(SB)/8, $0x0101010101010101
GLOBL one8<>(SB), RODATA|NOPTR, $32

DATA hex10<>+0(SB)/8, $0x1010101010101010
DATA hex10<>+8(SB)/8, $0x1010101010101010
DATA hex10<>+16(SB)/8, $0x1010101010101010
DATA hex10<>+24(SB)/8, $0x1010101010101010
GLOBL hex10<>(SB), RODATA|NOPTR, $32

DATA allones<>+0(SB)/8, $-1
DATA allones<>+8(SB)/8, $-1
DATA allones<>+16(SB)/8, $-1
DATA allones<>+24(SB)/8, $-1
GLOBL allones<>(SB), RODATA|NOPTR, $32

// bitshuf sends byte 0 of a dword to bytes 0–7, byte 1 to 8–15, byte 2 to
// 16–23 and byte 3 to 24–31 (each 128-bit lane holds the whole dword).
DATA bitshuf<>+0(SB)/8, $0x0000000000000000
DATA bitshuf<>+8(SB)/8, $0x0101010101010101
DATA bitshuf<>+16(SB)/8, $0x0202020202020202
DATA bitshuf<>+24(SB)/8, $0x0303030303030303
GLOBL bitshuf<>(SB), RODATA|NOPTR, $32

// bitmask has every bit of byte k set except bit k%8: OR-ed onto a byte
// holding bit k of a mask, it is all ones exactly when that bit is set.
DATA bitmask<>+0(SB)/8, $0x7fbfdfeff7fbfdfe
DATA bitmask<>+8(SB)/8, $0x7fbfdfeff7fbfdfe
DATA bitmask<>+16(SB)/8, $0x7fbfdfeff7fbfdfe
DATA bitmask<>+24(SB)/8, $0x7fbfdfeff7fbfdfe
GLOBL bitmask<>(SB), RODATA|NOPTR, $32

// pairshuf spreads word 0 of each dword over the low lane and word 1 over
// the high lane: the two 16-value sub-block scales of a 32-value group.
DATA pairshuf<>+0(SB)/8, $0x0100010001000100
DATA pairshuf<>+8(SB)/8, $0x0100010001000100
DATA pairshuf<>+16(SB)/8, $0x0302030203020302
DATA pairshuf<>+24(SB)/8, $0x0302030203020302
GLOBL pairshuf<>(SB), RODATA|NOPTR, $32

// thirtytwo16: 32 in every word (Q3_K's scales are stored +32).
DATA thirtytwo16<>+0(SB)/8, $0x0020002000200020
DATA thirtytwo16<>+8(SB)/8, $0x0020002000200020
DATA thirtytwo16<>+16(SB)/8, $0x0020002000200020
DATA thirtytwo16<>+24(SB)/8, $0x0020002000200020
GLOBL thirtytwo16<>(SB), RODATA|NOPTR, $32

// iq4nl is IQ4_NL's code book in both lanes (kvaluesIQ4NL).
DATA iq4nl<>+0(SB)/8, $0xf6eaddcfbfad9881
DATA iq4nl<>+8(SB)/8, $0x7159453526190d01
DATA iq4nl<>+16(SB)/8, $0xf6eaddcfbfad9881
DATA iq4nl<>+24(SB)/8, $0x7159453526190d01
GLOBL iq4nl<>(SB), RODATA|NOPTR, $32

// mxfp4 is MXFP4's doubled E2M1 values in both lanes (kvaluesMXFP4).
DATA mxfp4<>+0(SB)/8, $0x0c08060403020100
DATA mxfp4<>+8(SB)/8, $0xf4f8fafcfdfeff00
DATA mxfp4<>+16(SB)/8, $0x0c08060403020100
DATA mxfp4<>+24(SB)/8, $0xf4f8fafcfdfeff00
GLOBL mxfp4<>(SB), RODATA|NOPTR, $32

DATA negeight<>+0(SB)/4, $-8.0
GLOBL negeight<>(SB), RODATA|NOPTR, $4

DATA negsixteen<>+0(SB)/4, $-16.0
GLOBL negsixteen<>(SB), RODATA|NOPTR, $4

// ROWARGS loads the arguments shared by every kernel.
#define ROWARGS \
	MOVQ w+0(FP), R11   \
	MOVQ rb+8(FP), R8   \
	MOVQ n+16(FP), R9   \
	MOVQ out+40(FP), R10

// ROWSTART points SI, DI, CX at a row's first block.
#define ROWSTART \
	MOVQ R11, SI        \
	MOVQ x+24(FP), DI   \
	MOVQ nb+32(FP), CX

// ROWEND stores X0 as the row's result and moves to the next row, looping
// to label row while rows are left.
#define ROWEND \
	VMOVSS X0, (R10) \
	ADDQ   $4, R10   \
	ADDQ   R8, R11   \
	DECQ   R9

// HSUMY0 reduces Y0 to X0's low float.
#define HSUMY0 \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS       X1, X0, X0 \
	VHADDPS      X0, X0, X0 \
	VHADDPS      X0, X0, X0

// SCALE(woff, yr, xr) leaves the f16 weight scale at woff(SI) times the
// activation block's d (0(DI)) in every lane of yr (xr is its low half).
// Y5 is a temporary.
#define SCALE(woff, yr, xr) \
	VPBROADCASTW woff(SI), xr \
	VCVTPH2PS    xr, yr       \
	VBROADCASTSS (DI), Y5     \
	VMULPS       Y5, yr, yr

// ---- 32-value formats: x blocks are {d, s float32; q [32]int8} (40 bytes).

// NIB32(off) widens the 16 nibble bytes at off(SI) to 32 unsigned codes in
// Y1, value order (low nibbles are values 0–15, high nibbles 16–31).
#define NIB32(off) \
	VMOVDQU     off(SI), X1    \
	VPSRLW      $4, X1, X2     \
	VINSERTI128 $1, X2, Y1, Y1 \
	VPAND       Y14, Y1, Y1

// FIFTH(off) ORs the fifth bits (the u32 at off(SI), bit j for value j)
// into Y1 as 0x10.
#define FIFTH(off) \
	VPBROADCASTD off(SI), Y2 \
	VPSHUFB      Y13, Y2, Y2 \
	VPOR         Y12, Y2, Y2 \
	VPCMPEQB     Y11, Y2, Y2 \
	VPAND        Y10, Y2, Y2 \
	VPOR         Y2, Y1, Y1

// UDOT: Y3 = the 8 float sums of unsigned codes Y1 times x's codes.
#define UDOT \
	VPMADDUBSW 8(DI), Y1, Y3 \
	VPMADDWD   Y15, Y3, Y3   \
	VCVTDQ2PS  Y3, Y3

// SDOT: as UDOT for signed codes in Y1 (|w| times x with w's signs).
#define SDOT \
	VMOVDQU    8(DI), Y2   \
	VPSIGNB    Y1, Y1, Y3  \
	VPSIGNB    Y1, Y2, Y2  \
	VPMADDUBSW Y2, Y3, Y3  \
	VPMADDWD   Y15, Y3, Y3 \
	VCVTDQ2PS  Y3, Y3

// LEGACY32 is the loop shared by the 32-value kernels: body computes Y3
// for one block of bsize bytes; with the block's f32 d_w in X4, off may add
// to X8 (the row's scalar offset/minimum sum), which fin folds into X0.
#define LEGACY32(body, off, bsize, fin) \
	ROWARGS                           \
	VMOVDQU nib4<>(SB), Y14           \
	VMOVDQU ones16<>(SB), Y15         \
	VMOVDQU bitshuf<>(SB), Y13        \
	VMOVDQU bitmask<>(SB), Y12        \
	VMOVDQU allones<>(SB), Y11        \
	VMOVDQU hex10<>(SB), Y10          \
	VMOVDQU iq4nl<>(SB), Y9           \
row:                                  \
	ROWSTART                          \
	VXORPS Y0, Y0, Y0                 \
	VXORPS X8, X8, X8                 \
blk:                                  \
	body                              \
	VPBROADCASTW (SI), X4             \
	VCVTPH2PS    X4, Y4               \
	off                               \
	VBROADCASTSS (DI), Y5             \
	VMULPS       Y5, Y4, Y4           \
	VFMADD231PS  Y4, Y3, Y0           \
	ADDQ         $bsize, SI           \
	ADDQ         $40, DI              \
	DECQ         CX                   \
	JNZ          blk                  \
	HSUMY0                            \
	fin                               \
	ROWEND                            \
	JNZ row                           \
	VZEROUPPER                        \
	RET

// OFFD: X8 += d_w · s_x.
#define OFFD VFMADD231SS 4(DI), X4, X8

// OFFM: X8 += m_w · s_x for the f16 minimum at 2(SI).
#define OFFM \
	VPBROADCASTW 2(SI), X6 \
	VCVTPH2PS    X6, X6    \
	VFMADD231SS  4(DI), X6, X8

#define OFFNONE

#define BODYQ8_0 \
	VMOVDQU 2(SI), Y1 \
	SDOT

#define BODYQ4_0 \
	NIB32(2) \
	UDOT

#define BODYQ4_1 \
	NIB32(4) \
	UDOT

#define BODYQ5_0 \
	NIB32(6)  \
	FIFTH(2)  \
	UDOT

#define BODYQ5_1 \
	NIB32(8)  \
	FIFTH(4)  \
	UDOT

#define BODYIQ4NL \
	NIB32(2)             \
	VPSHUFB Y1, Y9, Y1   \
	SDOT

#define FINNONE
#define FINNEG8 VFMADD231SS negeight<>(SB), X8, X0
#define FINNEG16 VFMADD231SS negsixteen<>(SB), X8, X0
#define FINADD VADDSS X8, X0, X0

// func dotRowsQ8_0AVX2(w *byte, rb, n int, x *byte, nb int, out *float32)
TEXT ·dotRowsQ8_0AVX2(SB), NOSPLIT, $0-48
	LEGACY32(BODYQ8_0, OFFNONE, 34, FINNONE)

// func dotRowsQ4_0AVX2(w *byte, rb, n int, x *byte, nb int, out *float32)
// Σ d_w·d_x·(q−8)·x = d_w·d_x·Σq·x − 8·d_w·s_x.
TEXT ·dotRowsQ4_0AVX2(SB), NOSPLIT, $0-48
	LEGACY32(BODYQ4_0, OFFD, 18, FINNEG8)

// func dotRowsQ4_1AVX2(w *byte, rb, n int, x *byte, nb int, out *float32)
TEXT ·dotRowsQ4_1AVX2(SB), NOSPLIT, $0-48
	LEGACY32(BODYQ4_1, OFFM, 20, FINADD)

// func dotRowsQ5_0AVX2(w *byte, rb, n int, x *byte, nb int, out *float32)
TEXT ·dotRowsQ5_0AVX2(SB), NOSPLIT, $0-48
	LEGACY32(BODYQ5_0, OFFD, 22, FINNEG16)

// func dotRowsQ5_1AVX2(w *byte, rb, n int, x *byte, nb int, out *float32)
TEXT ·dotRowsQ5_1AVX2(SB), NOSPLIT, $0-48
	LEGACY32(BODYQ5_1, OFFM, 24, FINADD)

// func dotRowsIQ4NLAVX2(w *byte, rb, n int, x *byte, nb int, out *float32)
TEXT ·dotRowsIQ4NLAVX2(SB), NOSPLIT, $0-48
	LEGACY32(BODYIQ4NL, OFFNONE, 18, FINNONE)

// func dotRowsMXFP4AVX2(w *byte, rb, n int, x *byte, nb int, out *float32)
// A 17-byte block is the E8M0 scale byte, then IQ4_NL-ordered nibbles
// indexing mxfp4; the block's float scale is e8m0Half[e] (a Go table, so
// the 255 → NaN and subnormal cases are the decoder's) times x's d.
TEXT ·dotRowsMXFP4AVX2(SB), NOSPLIT, $0-48
	ROWARGS
	VMOVDQU nib4<>(SB), Y14
	VMOVDQU ones16<>(SB), Y15
	VMOVDQU mxfp4<>(SB), Y9
	LEAQ    ·e8m0Half(SB), R12

row:
	ROWSTART
	VXORPS Y0, Y0, Y0

blk:
	NIB32(1)
	VPSHUFB      Y1, Y9, Y1
	SDOT
	MOVBLZX      (SI), AX
	VBROADCASTSS (R12)(AX*4), Y4
	VBROADCASTSS (DI), Y5
	VMULPS       Y5, Y4, Y4
	VFMADD231PS  Y4, Y3, Y0
	ADDQ         $17, SI
	ADDQ         $40, DI
	DECQ         CX
	JNZ          blk
	HSUMY0
	ROWEND
	JNZ          row
	VZEROUPPER
	RET

// ---- 256-value formats: x blocks are {d float32; bsums [16]int16;
// q [256]int8} (292 bytes: bsums at 4, codes at 36). Y3 accumulates the
// block's int32 sums; the K-quants with minimums accumulate d_min·d_x·Σ
// m·bsums in Y9 and subtract it at the end.

// KROWS is the row/block loop of the 256-value kernels: body does one
// block of bsize bytes into Y3 (zeroed before it) and may add to Y9; the
// block's d (f16 at doff) scales Y3 into Y0.
#define KROWS(body, bsize, doff) \
	ROWARGS                      \
	VMOVDQU nib4<>(SB), Y14      \
	VMOVDQU three8<>(SB), Y12    \
	VMOVDQU one8<>(SB), Y13      \
	VMOVDQU pairshuf<>(SB), Y11  \
	VMOVDQU iq4nl<>(SB), Y10     \
row:                             \
	ROWSTART                     \
	VXORPS Y0, Y0, Y0            \
	VXORPS Y9, Y9, Y9            \
blk:                             \
	VPXOR       Y3, Y3, Y3       \
	body                         \
	VCVTDQ2PS   Y3, Y3           \
	SCALE(doff, Y4, X4)          \
	VFMADD231PS Y4, Y3, Y0       \
	ADDQ        $bsize, SI       \
	ADDQ        $292, DI         \
	DECQ        CX               \
	JNZ         blk              \
	VSUBPS      Y9, Y0, Y0       \
	HSUMY0                       \
	ROWEND                       \
	JNZ row                      \
	VZEROUPPER                   \
	RET

// PAIRDOT(codes, xoff, soff): Y3 += (codes · x[xoff]) with the low lane's
// 16 products scaled by the word at soff(SP) and the high lane's by the
// next word (Y7 is a temporary; codes is clobbered).
#define PAIRDOT(codes, xoff, soff) \
	VPMADDUBSW   xoff(DI), codes, codes \
	VPBROADCASTD soff(SP), Y7           \
	VPSHUFB      Y11, Y7, Y7            \
	VPMADDWD     Y7, codes, codes       \
	VPADDD       codes, Y3, Y3

// Q4_K/Q5_K scale unpacking in one 16-byte vector: P gathers each output's
// main byte (s0–3, s8–11 for the scales, s4–7, s8–11 for the minimums), Q
// the byte whose top two bits are the output's bits 4–5 (s0–3 for scales
// 4–7, s4–7 for minimums 4–7; zero elsewhere); out = (P & A) | ((P >> 4) &
// B) | ((Q >> 2) & 0x30).
DATA k4shufP<>+0(SB)/8, $0x0b0a090803020100
DATA k4shufP<>+8(SB)/8, $0x0b0a090807060504
GLOBL k4shufP<>(SB), RODATA|NOPTR, $16
DATA k4shufQ<>+0(SB)/8, $0x0302010080808080
DATA k4shufQ<>+8(SB)/8, $0x0706050480808080
GLOBL k4shufQ<>(SB), RODATA|NOPTR, $16
DATA k4maskA<>+0(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA k4maskA<>+8(SB)/8, $0x000000003f3f3f3f
GLOBL k4maskA<>(SB), RODATA|NOPTR, $16
DATA k4maskB<>+0(SB)/8, $0x0000000000000000
DATA k4maskB<>+8(SB)/8, $0x0f0f0f0f00000000
GLOBL k4maskB<>(SB), RODATA|NOPTR, $16
DATA k4hi<>+0(SB)/8, $0x3030303030303030
DATA k4hi<>+8(SB)/8, $0x3030303030303030
GLOBL k4hi<>(SB), RODATA|NOPTR, $16

// K4UNPACK leaves the 8 scales and 8 minimums of the Q4_K/Q5_K block at
// SI as 16 words in Y4 (scales in the low lane); X5–X7 are clobbered.
#define K4UNPACK \
	VMOVDQU   4(SI), X4                     \
	VPSHUFB   k4shufP<>(SB), X4, X5      \
	VPSHUFB   k4shufQ<>(SB), X4, X6      \
	VPSRLW    $4, X5, X7                    \
	VPAND     k4maskB<>(SB), X7, X7      \
	VPAND     k4maskA<>(SB), X5, X5      \
	VPOR      X7, X5, X5                    \
	VPSRLW    $2, X6, X6                    \
	VPAND     k4hi<>(SB), X6, X6         \
	VPOR      X6, X5, X5                    \
	VPMOVZXBW X5, Y4

// Q4_K: d, dmin, 12 bytes of (scale, min) pairs, 128 nibble bytes at 16.
// Scales go to 0(SP) as 8 words; Σ m·(bsums[2k]+bsums[2k+1]) into Y9.
#define Q4KSCALES \
	K4UNPACK                     \
	VMOVDQU   X4, 0(SP)          \
	VEXTRACTI128 $1, Y4, X5      \
	VMOVDQU   4(DI), Y6          \
	VEXTRACTI128 $1, Y6, X7      \
	VPHADDW   X7, X6, X6         \
	VPMADDWD  X6, X5, X6         \
	VCVTDQ2PS X6, X6             \
	SCALE(2, Y8, X8)             \
	VFMADD231PS X8, X6, X9

// Q4KCHUNK: 64 values from the 32 nibble bytes at qoff(SI): low nibbles
// (x at xlo, scale word at slo) and high nibbles (xhi, shi).
#define Q4KCHUNK(qoff, xlo, xhi, slo, shi) \
	VMOVDQU      qoff(SI), Y1     \
	VPSRLW       $4, Y1, Y2       \
	VPAND        Y14, Y1, Y1      \
	VPAND        Y14, Y2, Y2      \
	VPMADDUBSW   xlo(DI), Y1, Y1  \
	VPMADDUBSW   xhi(DI), Y2, Y2  \
	VPBROADCASTW slo(SP), Y4      \
	VPBROADCASTW shi(SP), Y5      \
	VPMADDWD     Y4, Y1, Y1       \
	VPMADDWD     Y5, Y2, Y2       \
	VPADDD       Y1, Y3, Y3       \
	VPADDD       Y2, Y3, Y3

#define BODYQ4K \
	Q4KSCALES                          \
	Q4KCHUNK(16, 36, 68, 0, 2)         \
	Q4KCHUNK(48, 100, 132, 4, 6)       \
	Q4KCHUNK(80, 164, 196, 8, 10)      \
	Q4KCHUNK(112, 228, 260, 12, 14)

// func dotRowsQ4KAVX2(w *byte, rb, n int, x *byte, nb int, out *float32)
TEXT ·dotRowsQ4KAVX2(SB), NOSPLIT, $16-48
	KROWS(BODYQ4K, 144, 0)

// Q5_K: as Q4_K with 32 bytes of fifth bits at 16 (bit 2j of byte l for
// value 64j+l, bit 2j+1 for 64j+32+l) and the nibbles at 48.
#define Q5FIFTH(shift, dst) \
	VPSRLW $shift, Y8, Y4 \
	VPAND  Y13, Y4, Y4    \
	VPSLLW $4, Y4, Y4     \
	VPOR   Y4, dst, dst

#define Q5KCHUNK(qoff, xlo, xhi, slo, shi, blo, bhi) \
	VMOVDQU      qoff(SI), Y1     \
	VPSRLW       $4, Y1, Y2       \
	VPAND        Y14, Y1, Y1      \
	VPAND        Y14, Y2, Y2      \
	Q5FIFTH(blo, Y1)              \
	Q5FIFTH(bhi, Y2)              \
	VPMADDUBSW   xlo(DI), Y1, Y1  \
	VPMADDUBSW   xhi(DI), Y2, Y2  \
	VPBROADCASTW slo(SP), Y4      \
	VPBROADCASTW shi(SP), Y5      \
	VPMADDWD     Y4, Y1, Y1       \
	VPMADDWD     Y5, Y2, Y2       \
	VPADDD       Y1, Y3, Y3       \
	VPADDD       Y2, Y3, Y3

#define BODYQ5K \
	Q4KSCALES                                \
	VMOVDQU 16(SI), Y8                       \
	Q5KCHUNK(48, 36, 68, 0, 2, 0, 1)         \
	Q5KCHUNK(80, 100, 132, 4, 6, 2, 3)       \
	Q5KCHUNK(112, 164, 196, 8, 10, 4, 5)     \
	Q5KCHUNK(144, 228, 260, 12, 14, 6, 7)

// func dotRowsQ5KAVX2(w *byte, rb, n int, x *byte, nb int, out *float32)
TEXT ·dotRowsQ5KAVX2(SB), NOSPLIT, $16-48
	KROWS(BODYQ5K, 176, 0)

// Q6_K: ql[128] at 0, qh[64] at 128, int8 scales[16] at 192, d at 208.
// Codes are 6-bit unsigned (value + 32); the −32 is applied through the
// activation's bsums: Y3 starts at −32·Σ sc·bsums.
#define Q6KGROUP(src, qshift, hshift, xoff, soff) \
	VPSRLW $qshift, src, Y4     \
	VPAND  Y14, Y4, Y4          \
	VPSRLW $hshift, Y8, Y6      \
	VPAND  Y12, Y6, Y6          \
	VPSLLW $4, Y6, Y6           \
	VPOR   Y6, Y4, Y4           \
	PAIRDOT(Y4, xoff, soff)

#define Q6KHALF(ql, ql2, qh, x0, x1, x2, x3, s0, s1, s2, s3) \
	VMOVDQU ql(SI), Y1                \
	VMOVDQU ql2(SI), Y2               \
	VMOVDQU qh(SI), Y8                \
	Q6KGROUP(Y1, 0, 0, x0, s0)        \
	Q6KGROUP(Y2, 0, 2, x1, s1)        \
	Q6KGROUP(Y1, 4, 4, x2, s2)        \
	Q6KGROUP(Y2, 4, 6, x3, s3)

#define BODYQ6K \
	VPMOVSXBW 192(SI), Y5                                \
	VMOVDQU   Y5, 0(SP)                                  \
	VPMADDWD  4(DI), Y5, Y6                              \
	VPSLLD    $5, Y6, Y6                                 \
	VPSUBD    Y6, Y3, Y3                                 \
	Q6KHALF(0, 32, 128, 36, 68, 100, 132, 0, 4, 8, 12)       \
	Q6KHALF(64, 96, 160, 164, 196, 228, 260, 16, 20, 24, 28)

// func dotRowsQ6KAVX2(w *byte, rb, n int, x *byte, nb int, out *float32)
TEXT ·dotRowsQ6KAVX2(SB), NOSPLIT, $32-48
	KROWS(BODYQ6K, 210, 208)

// Q3_K: hmask[32] at 0, qs[64] at 32, 12 bytes of 6-bit scales at 96, d at
// 108. A value is scale·(q2 − 4·(1 − h)); both products go through
// VPMADDUBSW and are subtracted as int16 (|·| ≤ 2·4·127).
#define Q3KSCALES \
	MOVL      96(SI), AX          \
	MOVL      100(SI), BX         \
	MOVL      104(SI), DX         \
	MOVL      DX, R12             \
	ANDL      $0x03030303, R12    \
	SHLL      $4, R12             \
	MOVL      AX, R13             \
	ANDL      $0x0f0f0f0f, R13    \
	ORL       R13, R12            \
	MOVL      R12, 0(SP)          \
	MOVL      DX, R12             \
	SHRL      $2, R12             \
	ANDL      $0x03030303, R12    \
	SHLL      $4, R12             \
	MOVL      BX, R13             \
	ANDL      $0x0f0f0f0f, R13    \
	ORL       R13, R12            \
	MOVL      R12, 4(SP)          \
	MOVL      DX, R12             \
	SHRL      $4, R12             \
	ANDL      $0x03030303, R12    \
	SHLL      $4, R12             \
	SHRL      $4, AX              \
	ANDL      $0x0f0f0f0f, AX     \
	ORL       AX, R12             \
	MOVL      R12, 8(SP)          \
	SHRL      $6, DX              \
	ANDL      $0x03030303, DX     \
	SHLL      $4, DX              \
	SHRL      $4, BX              \
	ANDL      $0x0f0f0f0f, BX     \
	ORL       BX, DX              \
	MOVL      DX, 12(SP)          \
	VPMOVZXBW 0(SP), Y5           \
	VPSUBW    thirtytwo16<>(SB), Y5, Y5 \
	VMOVDQU   Y5, 0(SP)

#define Q3KGROUP(qshift, bit, xoff, soff) \
	VPSRLW     $qshift, Y1, Y4   \
	VPAND      Y12, Y4, Y4       \
	VPSRLW     $bit, Y8, Y6      \
	VPANDN     Y13, Y6, Y6       \
	VPSLLW     $2, Y6, Y6        \
	VPMADDUBSW xoff(DI), Y4, Y4  \
	VPMADDUBSW xoff(DI), Y6, Y6  \
	VPSUBW     Y6, Y4, Y4        \
	VPBROADCASTD soff(SP), Y7    \
	VPSHUFB    Y11, Y7, Y7       \
	VPMADDWD   Y7, Y4, Y4        \
	VPADDD     Y4, Y3, Y3

#define BODYQ3K \
	Q3KSCALES                      \
	VMOVDQU 0(SI), Y8              \
	VMOVDQU 32(SI), Y1             \
	Q3KGROUP(0, 0, 36, 0)          \
	Q3KGROUP(2, 1, 68, 4)          \
	Q3KGROUP(4, 2, 100, 8)         \
	Q3KGROUP(6, 3, 132, 12)        \
	VMOVDQU 64(SI), Y1             \
	Q3KGROUP(0, 4, 164, 16)        \
	Q3KGROUP(2, 5, 196, 20)        \
	Q3KGROUP(4, 6, 228, 24)        \
	Q3KGROUP(6, 7, 260, 28)

// func dotRowsQ3KAVX2(w *byte, rb, n int, x *byte, nb int, out *float32)
TEXT ·dotRowsQ3KAVX2(SB), NOSPLIT, $32-48
	KROWS(BODYQ3K, 110, 108)

// Q2_K: 16 (scale, min) nibble bytes at 0, qs[64] at 16, d at 80, dmin at
// 82. Σ min·bsums goes to Y9 scaled by dmin·d_x.
#define Q2KGROUP(qshift, xoff, soff) \
	VPSRLW $qshift, Y1, Y4  \
	VPAND  Y12, Y4, Y4      \
	PAIRDOT(Y4, xoff, soff)

#define BODYQ2K \
	VPMOVZXBW   0(SI), Y5          \
	VPSRLW      $4, Y5, Y6         \
	VPAND       Y14, Y5, Y5        \
	VMOVDQU     Y5, 0(SP)          \
	VPMADDWD    4(DI), Y6, Y6      \
	VCVTDQ2PS   Y6, Y6             \
	SCALE(82, Y8, X8)              \
	VFMADD231PS Y8, Y6, Y9         \
	VMOVDQU     16(SI), Y1         \
	Q2KGROUP(0, 36, 0)             \
	Q2KGROUP(2, 68, 4)             \
	Q2KGROUP(4, 100, 8)            \
	Q2KGROUP(6, 132, 12)           \
	VMOVDQU     48(SI), Y1         \
	Q2KGROUP(0, 164, 16)           \
	Q2KGROUP(2, 196, 20)           \
	Q2KGROUP(4, 228, 24)           \
	Q2KGROUP(6, 260, 28)

// func dotRowsQ2KAVX2(w *byte, rb, n int, x *byte, nb int, out *float32)
TEXT ·dotRowsQ2KAVX2(SB), NOSPLIT, $32-48
	KROWS(BODYQ2K, 84, 80)

// IQ4_XS: d at 0, scales_h (u16) at 2, scales_l[4] at 4, qs[128] at 8.
// Sub-block ib's scale is nibble ib of scales_l | bits 2ib..2ib+1 of
// scales_h << 4, minus 32; its 32 codes are the 16 bytes at 8+16ib.
#define IQ4XSSCALE(ib, lshift, hshift) \
	MOVL  AX, DX          \
	SHRL  $lshift, DX     \
	ANDL  $15, DX         \
	MOVL  BX, R12         \
	SHRL  $hshift, R12    \
	ANDL  $3, R12         \
	SHLL  $4, R12         \
	ORL   R12, DX         \
	SUBL  $32, DX         \
	MOVW  DX, ib(SP)

#define IQ4XSSUB(qoff, xoff, soff) \
	NIB32(qoff)                  \
	VPSHUFB      Y1, Y10, Y1     \
	VMOVDQU      xoff(DI), Y2    \
	VPSIGNB      Y1, Y1, Y4      \
	VPSIGNB      Y1, Y2, Y2      \
	VPMADDUBSW   Y2, Y4, Y4      \
	VPBROADCASTW soff(SP), Y5    \
	VPMADDWD     Y5, Y4, Y4      \
	VPADDD       Y4, Y3, Y3

#define BODYIQ4XS \
	MOVL    4(SI), AX                \
	MOVWLZX 2(SI), BX                \
	IQ4XSSCALE(0, 0, 0)              \
	IQ4XSSCALE(2, 4, 2)              \
	IQ4XSSCALE(4, 8, 4)              \
	IQ4XSSCALE(6, 12, 6)             \
	IQ4XSSCALE(8, 16, 8)             \
	IQ4XSSCALE(10, 20, 10)           \
	IQ4XSSCALE(12, 24, 12)           \
	IQ4XSSCALE(14, 28, 14)           \
	IQ4XSSUB(8, 36, 0)               \
	IQ4XSSUB(24, 68, 2)              \
	IQ4XSSUB(40, 100, 4)             \
	IQ4XSSUB(56, 132, 6)             \
	IQ4XSSUB(72, 164, 8)             \
	IQ4XSSUB(88, 196, 10)            \
	IQ4XSSUB(104, 228, 12)           \
	IQ4XSSUB(120, 260, 14)

// func dotRowsIQ4XSAVX2(w *byte, rb, n int, x *byte, nb int, out *float32)
TEXT ·dotRowsIQ4XSAVX2(SB), NOSPLIT, $16-48
	KROWS(BODYIQ4XS, 136, 0)
