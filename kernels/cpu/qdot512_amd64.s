//go:build amd64

#include "textflag.h"

// AVX-512 siblings of the quantized dot kernels in qdot_amd64.s (same
// signatures, same register roles), for the formats where 64-byte vectors
// pay: Q8_0 (two blocks per vector, VNNI's VPDPBUSD replacing
// VPMADDUBSW+VPMADDWD), Q6_K (128 values per pair of vectors), Q4_K and
// Q5_K (64 values per vector), MXFP4 (two blocks per vector, as Q8_0).
// They need AVX512F/BW/VL and VNNI
// (useQ512); every other format keeps its AVX2 kernel on these CPUs.

// 64-byte constants.
DATA nib4z<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4z<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4z<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4z<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4z<>+32(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4z<>+40(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4z<>+48(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4z<>+56(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL nib4z<>(SB), RODATA|NOPTR, $64

DATA three8z<>+0(SB)/8, $0x0303030303030303
DATA three8z<>+8(SB)/8, $0x0303030303030303
DATA three8z<>+16(SB)/8, $0x0303030303030303
DATA three8z<>+24(SB)/8, $0x0303030303030303
DATA three8z<>+32(SB)/8, $0x0303030303030303
DATA three8z<>+40(SB)/8, $0x0303030303030303
DATA three8z<>+48(SB)/8, $0x0303030303030303
DATA three8z<>+56(SB)/8, $0x0303030303030303
GLOBL three8z<>(SB), RODATA|NOPTR, $64

DATA one8z<>+0(SB)/8, $0x0101010101010101
DATA one8z<>+8(SB)/8, $0x0101010101010101
DATA one8z<>+16(SB)/8, $0x0101010101010101
DATA one8z<>+24(SB)/8, $0x0101010101010101
DATA one8z<>+32(SB)/8, $0x0101010101010101
DATA one8z<>+40(SB)/8, $0x0101010101010101
DATA one8z<>+48(SB)/8, $0x0101010101010101
DATA one8z<>+56(SB)/8, $0x0101010101010101
GLOBL one8z<>(SB), RODATA|NOPTR, $64

// quadshuf spreads word i of each qword over 128-bit lane i: four
// consecutive 16-value sub-block scales over a vector of 64 products.
DATA quadshuf<>+0(SB)/8, $0x0100010001000100
DATA quadshuf<>+8(SB)/8, $0x0100010001000100
DATA quadshuf<>+16(SB)/8, $0x0302030203020302
DATA quadshuf<>+24(SB)/8, $0x0302030203020302
DATA quadshuf<>+32(SB)/8, $0x0504050405040504
DATA quadshuf<>+40(SB)/8, $0x0504050405040504
DATA quadshuf<>+48(SB)/8, $0x0706070607060706
DATA quadshuf<>+56(SB)/8, $0x0706070607060706
GLOBL quadshuf<>(SB), RODATA|NOPTR, $64

// halfshuf spreads word 0 of each dword over the low 256 bits and word 1
// over the high 256: two 32-value sub-block scales over 64 products.
DATA halfshuf<>+0(SB)/8, $0x0100010001000100
DATA halfshuf<>+8(SB)/8, $0x0100010001000100
DATA halfshuf<>+16(SB)/8, $0x0100010001000100
DATA halfshuf<>+24(SB)/8, $0x0100010001000100
DATA halfshuf<>+32(SB)/8, $0x0302030203020302
DATA halfshuf<>+40(SB)/8, $0x0302030203020302
DATA halfshuf<>+48(SB)/8, $0x0302030203020302
DATA halfshuf<>+56(SB)/8, $0x0302030203020302
GLOBL halfshuf<>(SB), RODATA|NOPTR, $64

// mxfp4z is MXFP4's doubled E2M1 values in every 128-bit lane.
DATA mxfp4z<>+0(SB)/8, $0x0c08060403020100
DATA mxfp4z<>+8(SB)/8, $0xf4f8fafcfdfeff00
DATA mxfp4z<>+16(SB)/8, $0x0c08060403020100
DATA mxfp4z<>+24(SB)/8, $0xf4f8fafcfdfeff00
DATA mxfp4z<>+32(SB)/8, $0x0c08060403020100
DATA mxfp4z<>+40(SB)/8, $0xf4f8fafcfdfeff00
DATA mxfp4z<>+48(SB)/8, $0x0c08060403020100
DATA mxfp4z<>+56(SB)/8, $0xf4f8fafcfdfeff00
GLOBL mxfp4z<>(SB), RODATA|NOPTR, $64

// ROWARGS512, ROWSTART512 and ROWEND512 are qdot_amd64.s's row loop.
#define ROWARGS512 \
	MOVQ w+0(FP), R11   \
	MOVQ rb+8(FP), R8   \
	MOVQ n+16(FP), R9   \
	MOVQ out+40(FP), R10

#define ROWSTART512 \
	MOVQ R11, SI        \
	MOVQ x+24(FP), DI   \
	MOVQ nb+32(FP), CX

#define ROWEND512 \
	VMOVSS X0, (R10) \
	ADDQ   $4, R10   \
	ADDQ   R8, R11   \
	DECQ   R9

// HSUMZ0 reduces Z0 to X0's low float.
#define HSUMZ0 \
	VEXTRACTF64X4 $1, Z0, Y1 \
	VADDPS        Y1, Y0, Y0 \
	VEXTRACTF128  $1, Y0, X1 \
	VADDPS        X1, X0, X0 \
	VHADDPS       X0, X0, X0 \
	VHADDPS       X0, X0, X0

// func dotRowsQ8_0AVX512(w *byte, rb, n int, x *byte, nb int, out *float32)
// Two blocks per step: |w| and x with w's signs into VPDPBUSD (16 int32
// sums, eight per block), scaled by [d_wA·d_xA ×8 | d_wB·d_xB ×8]. An odd
// last block runs the same way on 256-bit vectors.
TEXT ·dotRowsQ8_0AVX512(SB), NOSPLIT, $0-48
	ROWARGS512
	VPXORD Z15, Z15, Z15

q8row:
	ROWSTART512
	VPXORD Z0, Z0, Z0

q8pair:
	CMPQ          CX, $2
	JL            q8tail
	VMOVDQU       2(SI), Y1
	VINSERTI64X4  $1, 36(SI), Z1, Z1
	VMOVDQU       8(DI), Y2
	VINSERTI64X4  $1, 48(DI), Z2, Z2
	VPMOVB2M      Z1, K1
	VPABSB        Z1, Z1
	VPSUBB        Z2, Z15, K1, Z2
	VPXORD        Z3, Z3, Z3
	VPDPBUSD      Z2, Z1, Z3
	VCVTDQ2PS     Z3, Z3
	VPBROADCASTW  (SI), X4
	VPBROADCASTW  34(SI), X5
	VINSERTI128   $1, X5, Y4, Y4
	VCVTPH2PS     Y4, Z4
	VBROADCASTSS  (DI), Y5
	VBROADCASTSS  40(DI), Y6
	VINSERTF64X4  $1, Y6, Z5, Z5
	VMULPS        Z5, Z4, Z4
	VFMADD231PS   Z4, Z3, Z0
	ADDQ          $68, SI
	ADDQ          $80, DI
	SUBQ          $2, CX
	JMP           q8pair

q8tail:
	TESTQ         CX, CX
	JZ            q8done
	VMOVDQU       2(SI), Y1
	VMOVDQU       8(DI), Y2
	VPMOVB2M      Y1, K1
	VPABSB        Y1, Y1
	VPSUBB        Y2, Y15, K1, Y2
	VPXORD        Y3, Y3, Y3
	VPDPBUSD      Y2, Y1, Y3
	VCVTDQ2PS     Y3, Y3
	VPBROADCASTW  (SI), X4
	VCVTPH2PS     X4, Y4
	VBROADCASTSS  (DI), Y5
	VMULPS        Y5, Y4, Y4
	VMULPS        Y4, Y3, Y3
	VADDPS        Z3, Z0, Z0 // a 256-bit write to Y0 would clear Z0's upper half

q8done:
	HSUMZ0
	ROWEND512
	JNZ q8row
	VZEROUPPER
	RET

// MXFP4NIB(off, yr) unpacks the 16 nibble bytes at off(SI) into 32 codes
// in yr (low nibbles, then high; IQ4_NL order), not yet masked. Y2 is a
// temporary.
#define MXFP4NIB(off, yr, xr) \
	VMOVDQU     off(SI), xr \
	VPSRLW      $4, xr, X2  \
	VINSERTI128 $1, X2, yr, yr

// func dotRowsMXFP4AVX512(w *byte, rb, n int, x *byte, nb int, out *float32)
// dotRowsQ8_0AVX512's loop over MXFP4 blocks (17 bytes: the E8M0 byte,
// then nibbles): two blocks' codes looked up in mxfp4z, scaled by
// [e8m0Half[eA]·d_xA ×8 | e8m0Half[eB]·d_xB ×8].
TEXT ·dotRowsMXFP4AVX512(SB), NOSPLIT, $0-48
	ROWARGS512
	VPXORD    Z15, Z15, Z15
	VMOVDQU64 nib4z<>(SB), Z14
	VMOVDQU64 mxfp4z<>(SB), Z9
	LEAQ      ·e8m0Half(SB), R12

mxrow:
	ROWSTART512
	VPXORD Z0, Z0, Z0

mxpair:
	CMPQ          CX, $2
	JL            mxtail
	MXFP4NIB(1, Y1, X1)
	MXFP4NIB(18, Y3, X3)
	VINSERTI64X4  $1, Y3, Z1, Z1
	VPANDD        Z14, Z1, Z1
	VPSHUFB       Z1, Z9, Z1
	VMOVDQU       8(DI), Y2
	VINSERTI64X4  $1, 48(DI), Z2, Z2
	VPMOVB2M      Z1, K1
	VPABSB        Z1, Z1
	VPSUBB        Z2, Z15, K1, Z2
	VPXORD        Z3, Z3, Z3
	VPDPBUSD      Z2, Z1, Z3
	VCVTDQ2PS     Z3, Z3
	MOVBLZX       (SI), AX
	MOVBLZX       17(SI), BX
	VBROADCASTSS  (R12)(AX*4), Y4
	VBROADCASTSS  (R12)(BX*4), Y5
	VINSERTF64X4  $1, Y5, Z4, Z4
	VBROADCASTSS  (DI), Y5
	VBROADCASTSS  40(DI), Y6
	VINSERTF64X4  $1, Y6, Z5, Z5
	VMULPS        Z5, Z4, Z4
	VFMADD231PS   Z4, Z3, Z0
	ADDQ          $34, SI
	ADDQ          $80, DI
	SUBQ          $2, CX
	JMP           mxpair

mxtail:
	TESTQ         CX, CX
	JZ            mxdone
	MXFP4NIB(1, Y1, X1)
	VPAND         Y14, Y1, Y1
	VPSHUFB       Y1, Y9, Y1
	VMOVDQU       8(DI), Y2
	VPMOVB2M      Y1, K1
	VPABSB        Y1, Y1
	VPSUBB        Y2, Y15, K1, Y2
	VPXORD        Y3, Y3, Y3
	VPDPBUSD      Y2, Y1, Y3
	VCVTDQ2PS     Y3, Y3
	MOVBLZX       (SI), AX
	VBROADCASTSS  (R12)(AX*4), Y4
	VBROADCASTSS  (DI), Y5
	VMULPS        Y5, Y4, Y4
	VMULPS        Y4, Y3, Y3
	VADDPS        Z3, Z0, Z0 // a 256-bit write to Y0 would clear Z0's upper half

mxdone:
	HSUMZ0
	ROWEND512
	JNZ mxrow
	VZEROUPPER
	RET

// KROWS512 is KROWS on 512-bit accumulators: body does one block of
// bsize bytes into Z3 (zeroed first) and may add to Z9 (the minimums,
// subtracted at the end); the block's d (f16 at doff) scales Z3 into Z0.
#define KROWS512(body, bsize, doff) \
	ROWARGS512                    \
	VMOVDQU64 nib4z<>(SB), Z14    \
	VMOVDQU64 three8z<>(SB), Z12  \
	VMOVDQU64 one8z<>(SB), Z13    \
	VMOVDQU64 quadshuf<>(SB), Z11 \
	VMOVDQU64 halfshuf<>(SB), Z10 \
krow:                             \
	ROWSTART512                   \
	VPXORD Z0, Z0, Z0             \
	VPXORD Z9, Z9, Z9             \
kblk:                             \
	VPXORD        Z3, Z3, Z3      \
	body                          \
	VCVTDQ2PS     Z3, Z3          \
	VPBROADCASTW  doff(SI), Y4    \
	VCVTPH2PS     Y4, Z4          \
	VBROADCASTSS  (DI), Z5        \
	VMULPS        Z5, Z4, Z4      \
	VFMADD231PS   Z4, Z3, Z0      \
	ADDQ          $bsize, SI      \
	ADDQ          $292, DI        \
	DECQ          CX              \
	JNZ           kblk            \
	VSUBPS        Z9, Z0, Z0      \
	HSUMZ0                        \
	ROWEND512                     \
	JNZ krow                      \
	VZEROUPPER                    \
	RET

// Q6K512HALF: 128 values of one Q6_K half. ql's 64 bytes hold values 0–63
// in their low nibbles and 64–127 in their high ones; qh's byte l holds
// the top bit pairs of values l, l+32, l+64, l+96. Each 64-value vector's
// products take four sub-block scales, one per 128-bit lane.
#define Q6K512HALF(ql, qh, xlo, xhi, slo, shi) \
	VMOVDQU64     ql(SI), Z1          \
	VMOVDQU       qh(SI), Y8          \
	VPSRLW        $2, Y8, Y6          \
	VINSERTI64X4  $1, Y6, Z8, Z6      \
	VPSRLW        $4, Y8, Y7          \
	VPSRLW        $6, Y8, Y8          \
	VINSERTI64X4  $1, Y8, Z7, Z7      \
	VPANDD        Z12, Z6, Z6         \
	VPSLLW        $4, Z6, Z6          \
	VPANDD        Z12, Z7, Z7         \
	VPSLLW        $4, Z7, Z7          \
	VPANDD        Z14, Z1, Z2         \
	VPSRLW        $4, Z1, Z1          \
	VPANDD        Z14, Z1, Z1         \
	VPORD         Z6, Z2, Z2          \
	VPORD         Z7, Z1, Z1          \
	VPMADDUBSW    xlo(DI), Z2, Z2     \
	VPMADDUBSW    xhi(DI), Z1, Z1     \
	VPBROADCASTQ  slo(SP), Z4         \
	VPSHUFB       Z11, Z4, Z4         \
	VPBROADCASTQ  shi(SP), Z5         \
	VPSHUFB       Z11, Z5, Z5         \
	VPMADDWD      Z4, Z2, Z2          \
	VPMADDWD      Z5, Z1, Z1          \
	VPADDD        Z2, Z3, Z3          \
	VPADDD        Z1, Z3, Z3

#define BODYQ6K512 \
	VPMOVSXBW  192(SI), Y5                  \
	VMOVDQU    Y5, 0(SP)                    \
	VPMADDWD   4(DI), Y5, Y6                \
	VPSLLD     $5, Y6, Y6                   \
	VPSUBD     Y6, Y3, Y3                   \
	Q6K512HALF(0, 128, 36, 100, 0, 8)       \
	Q6K512HALF(64, 160, 164, 228, 16, 24)

// func dotRowsQ6KAVX512(w *byte, rb, n int, x *byte, nb int, out *float32)
TEXT ·dotRowsQ6KAVX512(SB), NOSPLIT, $32-48
	KROWS512(BODYQ6K512, 210, 208)

// Q4_K/Q5_K scale unpacking in one 16-byte vector: P gathers each output's
// main byte (s0–3, s8–11 for the scales, s4–7, s8–11 for the minimums), Q
// the byte whose top two bits are the output's bits 4–5 (s0–3 for scales
// 4–7, s4–7 for minimums 4–7; zero elsewhere); out = (P & A) | ((P >> 4) &
// B) | ((Q >> 2) & 0x30).
DATA k4shufPz<>+0(SB)/8, $0x0b0a090803020100
DATA k4shufPz<>+8(SB)/8, $0x0b0a090807060504
GLOBL k4shufPz<>(SB), RODATA|NOPTR, $16
DATA k4shufQz<>+0(SB)/8, $0x0302010080808080
DATA k4shufQz<>+8(SB)/8, $0x0706050480808080
GLOBL k4shufQz<>(SB), RODATA|NOPTR, $16
DATA k4maskAz<>+0(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA k4maskAz<>+8(SB)/8, $0x000000003f3f3f3f
GLOBL k4maskAz<>(SB), RODATA|NOPTR, $16
DATA k4maskBz<>+0(SB)/8, $0x0000000000000000
DATA k4maskBz<>+8(SB)/8, $0x0f0f0f0f00000000
GLOBL k4maskBz<>(SB), RODATA|NOPTR, $16
DATA k4hiz<>+0(SB)/8, $0x3030303030303030
DATA k4hiz<>+8(SB)/8, $0x3030303030303030
GLOBL k4hiz<>(SB), RODATA|NOPTR, $16

// K4UNPACKz leaves the 8 scales and 8 minimums of the Q4_K/Q5_K block at
// SI as 16 words in Y4 (scales in the low lane); X5–X7 are clobbered.
#define K4UNPACKz \
	VMOVDQU   4(SI), X4                     \
	VPSHUFB   k4shufPz<>(SB), X4, X5      \
	VPSHUFB   k4shufQz<>(SB), X4, X6      \
	VPSRLW    $4, X5, X7                    \
	VPAND     k4maskBz<>(SB), X7, X7      \
	VPAND     k4maskAz<>(SB), X5, X5      \
	VPOR      X7, X5, X5                    \
	VPSRLW    $2, X6, X6                    \
	VPAND     k4hiz<>(SB), X6, X6         \
	VPOR      X6, X5, X5                    \
	VPMOVZXBW X5, Y4

// Q4K512SCALES is qdot_amd64.s's Q4KSCALES: the 8 scale words at 0(SP) and
// d_min·d_x·Σ m·(bsums[2k]+bsums[2k+1]) into X9 (a 128-bit write zeroes
// Z9's upper bits, which only ever hold zeros).
#define Q4K512SCALES \
	K4UNPACKz                    \
	VMOVDQU   X4, 0(SP)          \
	VEXTRACTI128 $1, Y4, X5      \
	VMOVDQU   4(DI), Y6          \
	VEXTRACTI128 $1, Y6, X7      \
	VPHADDW   X7, X6, X6         \
	VPMADDWD  X6, X5, X6         \
	VCVTDQ2PS X6, X6             \
	VPBROADCASTW 2(SI), X8       \
	VCVTPH2PS X8, X8             \
	VBROADCASTSS (DI), X7        \
	VMULPS    X7, X8, X8         \
	VFMADD231PS X8, X6, X9

// Q4K512CHUNK: the 64 values of 32 nibble bytes (low nibbles then high,
// contiguous in x) times the scale pair at soff(SP); fifth is empty for
// Q4_K and ORs Q5_K's fifth bits into Z1.
#define Q4K512CHUNK(qoff, xoff, soff, fifth) \
	VMOVDQU       qoff(SI), Y1        \
	VPSRLW        $4, Y1, Y2          \
	VINSERTI64X4  $1, Y2, Z1, Z1      \
	VPANDD        Z14, Z1, Z1         \
	fifth                             \
	VPMADDUBSW    xoff(DI), Z1, Z1    \
	VPBROADCASTD  soff(SP), Z4        \
	VPSHUFB       Z10, Z4, Z4         \
	VPMADDWD      Z4, Z1, Z1          \
	VPADDD        Z1, Z3, Z3

#define NOFIFTH

#define BODYQ4K512 \
	Q4K512SCALES                       \
	Q4K512CHUNK(16, 36, 0, NOFIFTH)    \
	Q4K512CHUNK(48, 100, 4, NOFIFTH)   \
	Q4K512CHUNK(80, 164, 8, NOFIFTH)   \
	Q4K512CHUNK(112, 228, 12, NOFIFTH)

// func dotRowsQ4KAVX512(w *byte, rb, n int, x *byte, nb int, out *float32)
TEXT ·dotRowsQ4KAVX512(SB), NOSPLIT, $16-48
	KROWS512(BODYQ4K512, 144, 0)

// Q5FIFTH512(lo, hi): the fifth bits of chunk j (bit lo = 2j of qh's byte l
// for value l, bit hi = 2j+1 for value 32+l), as 0x10, into Z1.
#define Q5FIFTH512(lo, hi) \
	VPSRLW        $lo, Y8, Y6         \
	VPSRLW        $hi, Y8, Y7         \
	VINSERTI64X4  $1, Y7, Z6, Z6      \
	VPANDD        Z13, Z6, Z6         \
	VPSLLW        $4, Z6, Z6          \
	VPORD         Z6, Z1, Z1

#define Q5F0 Q5FIFTH512(0, 1)
#define Q5F1 Q5FIFTH512(2, 3)
#define Q5F2 Q5FIFTH512(4, 5)
#define Q5F3 Q5FIFTH512(6, 7)

#define BODYQ5K512 \
	Q4K512SCALES                       \
	VMOVDQU 16(SI), Y8                 \
	Q4K512CHUNK(48, 36, 0, Q5F0)       \
	Q4K512CHUNK(80, 100, 4, Q5F1)      \
	Q4K512CHUNK(112, 164, 8, Q5F2)     \
	Q4K512CHUNK(144, 228, 12, Q5F3)

// func dotRowsQ5KAVX512(w *byte, rb, n int, x *byte, nb int, out *float32)
TEXT ·dotRowsQ5KAVX512(SB), NOSPLIT, $16-48
	KROWS512(BODYQ5K512, 176, 0)
