//go:build amd64

#include "textflag.h"

// KV cache conversions with AVX2/F16C (see kvcache.go for the encodings).
// Go assembler operand order: sources first, destination last.

DATA kvW7f<>+0(SB)/8, $0x007f007f007f007f
DATA kvW7f<>+8(SB)/8, $0x007f007f007f007f
GLOBL kvW7f<>(SB), RODATA|NOPTR, $16

DATA kvW80<>+0(SB)/8, $0x0080008000800080
DATA kvW80<>+8(SB)/8, $0x0080008000800080
GLOBL kvW80<>(SB), RODATA|NOPTR, $16

DATA kvB0f<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA kvB0f<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL kvB0f<>(SB), RODATA|NOPTR, $16

// E2M1 codes 0..15 as int8 twice their value: 0 .5 1 1.5 2 3 4 6, negated.
DATA kvE2M1<>+0(SB)/8, $0x0c08060403020100
DATA kvE2M1<>+8(SB)/8, $0xf4f8fafcfdfeff00
GLOBL kvE2M1<>(SB), RODATA|NOPTR, $16

#define VEC8D(name, bits) \
	DATA name+0(SB)/4, $bits  \
	DATA name+4(SB)/4, $bits  \
	DATA name+8(SB)/4, $bits  \
	DATA name+12(SB)/4, $bits \
	DATA name+16(SB)/4, $bits \
	DATA name+20(SB)/4, $bits \
	DATA name+24(SB)/4, $bits \
	DATA name+28(SB)/4, $bits \
	GLOBL name(SB), RODATA|NOPTR, $32

VEC8D(kvD1<>, 0x00000001)
VEC8D(kvD7fff<>, 0x00007fff)
VEC8D(kvDAbs<>, 0x7fffffff)
VEC8D(kvDInf<>, 0x7f800000)
VEC8D(kvD40<>, 0x00000040)

// func f16ToF32AVX(dst *float32, src *byte, n int)
// n is a multiple of 8.
TEXT ·f16ToF32AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

h2sloop16:
	CMPQ      CX, $16
	JL        h2sloop8
	VCVTPH2PS (SI), Y0
	VCVTPH2PS 16(SI), Y1
	VMOVUPS   Y0, (DI)
	VMOVUPS   Y1, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JMP       h2sloop16

h2sloop8:
	CMPQ      CX, $8
	JL        h2sdone
	VCVTPH2PS (SI), Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JMP       h2sloop8

h2sdone:
	VZEROUPPER
	RET

// func bf16ToF32AVX(dst *float32, src *byte, n int)
// n is a multiple of 8.
TEXT ·bf16ToF32AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

b2sloop:
	CMPQ      CX, $8
	JL        b2sdone
	VPMOVZXWD (SI), Y0
	VPSLLD    $16, Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JMP       b2sloop

b2sdone:
	VZEROUPPER
	RET

// func e5m2ToF32AVX(dst *float32, src *byte, n int)
// n is a multiple of 8. An E5M2 code is the high byte of the binary16 of
// the same value (infinities and NaN included).
TEXT ·e5m2ToF32AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

e52loop:
	CMPQ      CX, $8
	JL        e52done
	VPMOVZXBW (SI), X0
	VPSLLW    $8, X0, X0
	VCVTPH2PS X0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $8, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JMP       e52loop

e52done:
	VZEROUPPER
	RET

// func e4m3ToF32AVX(dst *float32, src *byte, n int, mul *float32, mstep int)
// n is a multiple of 8. dst[i] = value(src[i])·mul[i/32·mstep/4]: the E4M3
// code c becomes the binary16 sign | (c&0x7f)<<7, which is the value
// divided by 2^8 (subnormals included), NaN codes (c&0x7f = 0x7f) become a
// binary16 NaN, and the multiplier carries the 2^8 (and an MX block scale).
TEXT ·e4m3ToF32AVX(SB), NOSPLIT, $0-40
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	MOVQ         mul+24(FP), R8
	MOVQ         mstep+32(FP), R9
	VMOVDQU      kvW7f<>(SB), X13
	VMOVDQU      kvW80<>(SB), X14
	VBROADCASTSS (R8), Y15
	MOVQ         $4, BX

e43loop:
	CMPQ         CX, $8
	JL           e43done
	VPMOVZXBW    (SI), X0
	VPAND        X13, X0, X1
	VPCMPEQW     X13, X1, X2
	VPSLLW       $7, X1, X1
	VPAND        X14, X0, X3
	VPSLLW       $8, X3, X3
	VPOR         X3, X1, X1
	VPOR         X2, X1, X1
	VCVTPH2PS    X1, Y1
	VMULPS       Y15, Y1, Y1
	VMOVUPS      Y1, (DI)
	ADDQ         $8, SI
	ADDQ         $32, DI
	SUBQ         $8, CX
	DECQ         BX
	JNZ          e43loop
	ADDQ         R9, R8
	MOVQ         $4, BX
	CMPQ         CX, $8
	JL           e43done
	VBROADCASTSS (R8), Y15
	JMP          e43loop

e43done:
	VZEROUPPER
	RET

// func nvfp4ToF32AVX(dst *float32, src *byte, nblk int, half *float32)
// nblk >= 1 blocks of 16 elements (8 bytes, the first element in the low
// nibble): dst = e2m1(code)·2·half[b] (half is the block scale over 2; the
// table holds twice each E2M1 value as an int8).
TEXT ·nvfp4ToF32AVX(SB), NOSPLIT, $0-32
	MOVQ    dst+0(FP), DI
	MOVQ    src+8(FP), SI
	MOVQ    nblk+16(FP), CX
	MOVQ    half+24(FP), R8
	VMOVDQU kvB0f<>(SB), X13
	VMOVDQU kvE2M1<>(SB), X14

nv4loop:
	VMOVQ        (SI), X0
	VPSRLW       $4, X0, X1
	VPAND        X13, X0, X0
	VPAND        X13, X1, X1
	VPUNPCKLBW   X1, X0, X0
	VPSHUFB      X0, X14, X0
	VPMOVSXBD    X0, Y1
	VPSRLDQ      $8, X0, X0
	VPMOVSXBD    X0, Y2
	VCVTDQ2PS    Y1, Y1
	VCVTDQ2PS    Y2, Y2
	VBROADCASTSS (R8), Y3
	VMULPS       Y3, Y1, Y1
	VMULPS       Y3, Y2, Y2
	VMOVUPS      Y1, (DI)
	VMOVUPS      Y2, 32(DI)
	ADDQ         $8, SI
	ADDQ         $64, DI
	ADDQ         $4, R8
	DECQ         CX
	JNZ          nv4loop
	VZEROUPPER
	RET

// func f32ToBF16AVX(dst *byte, src *float32, n int)
// n is a multiple of 8; rounding as F32ToBF16: to nearest even, NaN kept
// quiet ((b>>16) | 0x40).
TEXT ·f32ToBF16AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

s2bloop:
	CMPQ      CX, $8
	JL        s2bdone
	VMOVDQU   (SI), Y0
	VPSRLD    $16, Y0, Y1
	VPAND     kvD1<>(SB), Y1, Y2
	VPADDD    kvD7fff<>(SB), Y0, Y3
	VPADDD    Y2, Y3, Y3
	VPSRLD    $16, Y3, Y3
	VPAND     kvDAbs<>(SB), Y0, Y4
	VPCMPGTD  kvDInf<>(SB), Y4, Y5
	VPOR      kvD40<>(SB), Y1, Y6
	VPBLENDVB Y5, Y6, Y3, Y3
	VPACKUSDW Y3, Y3, Y3
	VPERMQ    $0x08, Y3, Y3
	VMOVDQU   X3, (DI)
	ADDQ      $32, SI
	ADDQ      $16, DI
	SUBQ      $8, CX
	JMP       s2bloop

s2bdone:
	VZEROUPPER
	RET
