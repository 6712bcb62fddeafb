//go:build amd64

#include "textflag.h"

// AVX-512 kernels of the Mamba-2 scan (mamba_amd64.go): the AVX2 ones with
// 16-lane vectors, 128 columns of axpyRows and 64 of ssmStep per pass.

// func axpyRowsAVX512(out, a, r *float32, l, as, rs, m int, beta float32)
TEXT ·axpyRowsAVX512(SB), NOSPLIT, $0-60
	MOVQ         out+0(FP), DI
	MOVQ         a+8(FP), SI
	MOVQ         r+16(FP), DX
	MOVQ         l+24(FP), CX
	MOVQ         as+32(FP), R8
	SHLQ         $2, R8
	MOVQ         rs+40(FP), R9
	SHLQ         $2, R9
	MOVQ         m+48(FP), R10
	MOVL         beta+56(FP), AX
	ANDL         $0x7fffffff, AX
	VBROADCASTSS beta+56(FP), Z13

zr128:
	CMPQ  CX, $128
	JL    zr16
	TESTL AX, AX
	JZ    zr128z
	VMULPS (DI), Z13, Z0
	VMULPS 64(DI), Z13, Z1
	VMULPS 128(DI), Z13, Z2
	VMULPS 192(DI), Z13, Z3
	VMULPS 256(DI), Z13, Z4
	VMULPS 320(DI), Z13, Z5
	VMULPS 384(DI), Z13, Z6
	VMULPS 448(DI), Z13, Z7
	JMP    zr128k

zr128z:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7

zr128k:
	MOVQ SI, R11
	MOVQ DX, R12
	MOVQ R10, BX

zr128l:
	VBROADCASTSS (R11), Z12
	VFMADD231PS  (R12), Z12, Z0
	VFMADD231PS  64(R12), Z12, Z1
	VFMADD231PS  128(R12), Z12, Z2
	VFMADD231PS  192(R12), Z12, Z3
	VFMADD231PS  256(R12), Z12, Z4
	VFMADD231PS  320(R12), Z12, Z5
	VFMADD231PS  384(R12), Z12, Z6
	VFMADD231PS  448(R12), Z12, Z7
	ADDQ         R8, R11
	ADDQ         R9, R12
	DECQ         BX
	JNZ          zr128l
	VMOVUPS      Z0, (DI)
	VMOVUPS      Z1, 64(DI)
	VMOVUPS      Z2, 128(DI)
	VMOVUPS      Z3, 192(DI)
	VMOVUPS      Z4, 256(DI)
	VMOVUPS      Z5, 320(DI)
	VMOVUPS      Z6, 384(DI)
	VMOVUPS      Z7, 448(DI)
	ADDQ         $512, DI
	ADDQ         $512, DX
	SUBQ         $128, CX
	JMP          zr128

zr16:
	CMPQ  CX, $16
	JL    zrdone
	TESTL AX, AX
	JZ    zr16z
	VMULPS (DI), Z13, Z0
	JMP    zr16k

zr16z:
	VPXORD Z0, Z0, Z0

zr16k:
	MOVQ SI, R11
	MOVQ DX, R12
	MOVQ R10, BX

zr16l:
	VBROADCASTSS (R11), Z12
	VFMADD231PS  (R12), Z12, Z0
	ADDQ         R8, R11
	ADDQ         R9, R12
	DECQ         BX
	JNZ          zr16l
	VMOVUPS      Z0, (DI)
	ADDQ         $64, DI
	ADDQ         $64, DX
	SUBQ         $16, CX
	JMP          zr16

zrdone:
	VZEROUPPER
	RET

// ZSTEP is mamba_amd64.s's SSTEP on zmm registers (Z8 = b[s], Z9 = c[s],
// Z12 = dA).
#define ZSTEP(off, X, ACC, T) \
	VMULPS      off(R12), Z12, T \
	VFMADD231PS X, Z8, T         \
	VMOVUPS     T, off(R12)      \
	VFMADD231PS T, Z9, ACC

// func ssmStepAVX512(h, xdt, b, cv, y *float32, l, n, hs int, dA float32)
TEXT ·ssmStepAVX512(SB), NOSPLIT, $0-68
	MOVQ         h+0(FP), DI
	MOVQ         xdt+8(FP), SI
	MOVQ         b+16(FP), R8
	MOVQ         cv+24(FP), R9
	MOVQ         y+32(FP), DX
	MOVQ         l+40(FP), CX
	MOVQ         n+48(FP), R10
	MOVQ         hs+56(FP), R11
	SHLQ         $2, R11
	VBROADCASTSS dA+64(FP), Z12

zs64:
	CMPQ    CX, $64
	JL      zs16
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 128(SI), Z2
	VMOVUPS 192(SI), Z3
	VPXORD  Z4, Z4, Z4
	VPXORD  Z5, Z5, Z5
	VPXORD  Z6, Z6, Z6
	VPXORD  Z7, Z7, Z7
	MOVQ    R8, AX
	MOVQ    R9, BX
	MOVQ    DI, R12
	MOVQ    R10, R13

zs64l:
	VBROADCASTSS (AX), Z8
	VBROADCASTSS (BX), Z9
	ZSTEP(0, Z0, Z4, Z10)
	ZSTEP(64, Z1, Z5, Z11)
	ZSTEP(128, Z2, Z6, Z10)
	ZSTEP(192, Z3, Z7, Z11)
	ADDQ         $4, AX
	ADDQ         $4, BX
	ADDQ         R11, R12
	DECQ         R13
	JNZ          zs64l
	VMOVUPS      Z4, (DX)
	VMOVUPS      Z5, 64(DX)
	VMOVUPS      Z6, 128(DX)
	VMOVUPS      Z7, 192(DX)
	ADDQ         $256, SI
	ADDQ         $256, DX
	ADDQ         $256, DI
	SUBQ         $64, CX
	JMP          zs64

zs16:
	CMPQ    CX, $16
	JL      zsdone
	VMOVUPS (SI), Z0
	VPXORD  Z4, Z4, Z4
	MOVQ    R8, AX
	MOVQ    R9, BX
	MOVQ    DI, R12
	MOVQ    R10, R13

zs16l:
	VBROADCASTSS (AX), Z8
	VBROADCASTSS (BX), Z9
	ZSTEP(0, Z0, Z4, Z10)
	ADDQ         $4, AX
	ADDQ         $4, BX
	ADDQ         R11, R12
	DECQ         R13
	JNZ          zs16l
	VMOVUPS      Z4, (DX)
	ADDQ         $64, SI
	ADDQ         $64, DX
	ADDQ         $64, DI
	SUBQ         $16, CX
	JMP          zs16

zsdone:
	VZEROUPPER
	RET
