//go:build amd64

#include "textflag.h"

// AVX2 kernels of the Mamba-2 scan and convolution (mamba_amd64.go). Go
// assembler operand order: sources first, destination last;
// VFMADD231PS a, b, d computes d += b·a.

// func axpyRowsAVX(out, a, r *float32, l, as, rs, m int, beta float32)
TEXT ·axpyRowsAVX(SB), NOSPLIT, $0-60
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
	ANDL         $0x7fffffff, AX       // zero when β is ±0: overwrite
	VBROADCASTSS beta+56(FP), Y13

ar64:
	CMPQ  CX, $64
	JL    ar8
	TESTL AX, AX
	JZ    ar64z
	VMULPS (DI), Y13, Y0
	VMULPS 32(DI), Y13, Y1
	VMULPS 64(DI), Y13, Y2
	VMULPS 96(DI), Y13, Y3
	VMULPS 128(DI), Y13, Y4
	VMULPS 160(DI), Y13, Y5
	VMULPS 192(DI), Y13, Y6
	VMULPS 224(DI), Y13, Y7
	JMP    ar64k

ar64z:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

ar64k:
	MOVQ SI, R11
	MOVQ DX, R12
	MOVQ R10, BX

ar64l:
	VBROADCASTSS (R11), Y12
	VFMADD231PS  (R12), Y12, Y0
	VFMADD231PS  32(R12), Y12, Y1
	VFMADD231PS  64(R12), Y12, Y2
	VFMADD231PS  96(R12), Y12, Y3
	VFMADD231PS  128(R12), Y12, Y4
	VFMADD231PS  160(R12), Y12, Y5
	VFMADD231PS  192(R12), Y12, Y6
	VFMADD231PS  224(R12), Y12, Y7
	ADDQ         R8, R11
	ADDQ         R9, R12
	DECQ         BX
	JNZ          ar64l
	VMOVUPS      Y0, (DI)
	VMOVUPS      Y1, 32(DI)
	VMOVUPS      Y2, 64(DI)
	VMOVUPS      Y3, 96(DI)
	VMOVUPS      Y4, 128(DI)
	VMOVUPS      Y5, 160(DI)
	VMOVUPS      Y6, 192(DI)
	VMOVUPS      Y7, 224(DI)
	ADDQ         $256, DI
	ADDQ         $256, DX
	SUBQ         $64, CX
	JMP          ar64

ar8:
	CMPQ  CX, $8
	JL    ardone
	TESTL AX, AX
	JZ    ar8z
	VMULPS (DI), Y13, Y0
	JMP    ar8k

ar8z:
	VXORPS Y0, Y0, Y0

ar8k:
	MOVQ   SI, R11
	MOVQ   DX, R12
	MOVQ   R10, BX

ar8l:
	VBROADCASTSS (R11), Y12
	VFMADD231PS  (R12), Y12, Y0
	ADDQ         R8, R11
	ADDQ         R9, R12
	DECQ         BX
	JNZ          ar8l
	VMOVUPS      Y0, (DI)
	ADDQ         $32, DI
	ADDQ         $32, DX
	SUBQ         $8, CX
	JMP          ar8

ardone:
	VZEROUPPER
	RET

// SSTEP updates one vector of state at off(R12) with xdt in X, accumulates
// C·h into ACC (Y8 = b[s], Y9 = c[s], Y12 = dA; T is a temporary).
#define SSTEP(off, X, ACC, T) \
	VMULPS      off(R12), Y12, T \
	VFMADD231PS X, Y8, T         \
	VMOVUPS     T, off(R12)      \
	VFMADD231PS T, Y9, ACC

// func ssmStepAVX(h, xdt, b, cv, y *float32, l, n, hs int, dA float32)
TEXT ·ssmStepAVX(SB), NOSPLIT, $0-68
	MOVQ         h+0(FP), DI
	MOVQ         xdt+8(FP), SI
	MOVQ         b+16(FP), R8
	MOVQ         cv+24(FP), R9
	MOVQ         y+32(FP), DX
	MOVQ         l+40(FP), CX
	MOVQ         n+48(FP), R10
	MOVQ         hs+56(FP), R11
	SHLQ         $2, R11
	VBROADCASTSS dA+64(FP), Y12

ss32:
	CMPQ    CX, $32
	JL      ss8
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VXORPS  Y4, Y4, Y4
	VXORPS  Y5, Y5, Y5
	VXORPS  Y6, Y6, Y6
	VXORPS  Y7, Y7, Y7
	MOVQ    R8, AX
	MOVQ    R9, BX
	MOVQ    DI, R12
	MOVQ    R10, R13

ss32l:
	VBROADCASTSS (AX), Y8
	VBROADCASTSS (BX), Y9
	SSTEP(0, Y0, Y4, Y10)
	SSTEP(32, Y1, Y5, Y11)
	SSTEP(64, Y2, Y6, Y10)
	SSTEP(96, Y3, Y7, Y11)
	ADDQ         $4, AX
	ADDQ         $4, BX
	ADDQ         R11, R12
	DECQ         R13
	JNZ          ss32l
	VMOVUPS      Y4, (DX)
	VMOVUPS      Y5, 32(DX)
	VMOVUPS      Y6, 64(DX)
	VMOVUPS      Y7, 96(DX)
	ADDQ         $128, SI
	ADDQ         $128, DX
	ADDQ         $128, DI
	SUBQ         $32, CX
	JMP          ss32

ss8:
	CMPQ    CX, $8
	JL      ssdone
	VMOVUPS (SI), Y0
	VXORPS  Y4, Y4, Y4
	MOVQ    R8, AX
	MOVQ    R9, BX
	MOVQ    DI, R12
	MOVQ    R10, R13

ss8l:
	VBROADCASTSS (AX), Y8
	VBROADCASTSS (BX), Y9
	SSTEP(0, Y0, Y4, Y10)
	ADDQ         $4, AX
	ADDQ         $4, BX
	ADDQ         R11, R12
	DECQ         R13
	JNZ          ss8l
	VMOVUPS      Y4, (DX)
	ADDQ         $32, SI
	ADDQ         $32, DX
	ADDQ         $32, DI
	SUBQ         $8, CX
	JMP          ss8

ssdone:
	VZEROUPPER
	RET

// func conv4AVX(out, x *float32, stride, n int, wt *[4][8]float32, bias *[8]float32, win *[3][8]float32)
TEXT ·conv4AVX(SB), NOSPLIT, $0-56
	MOVQ    out+0(FP), DI
	MOVQ    x+8(FP), SI
	MOVQ    stride+16(FP), R8
	SHLQ    $2, R8
	MOVQ    n+24(FP), CX
	MOVQ    wt+32(FP), AX
	MOVQ    bias+40(FP), BX
	MOVQ    win+48(FP), DX
	VMOVUPS (AX), Y0
	VMOVUPS 32(AX), Y1
	VMOVUPS 64(AX), Y2
	VMOVUPS 96(AX), Y3
	VMOVUPS (BX), Y4
	VMOVUPS (DX), Y5
	VMOVUPS 32(DX), Y6
	VMOVUPS 64(DX), Y7
	TESTQ   CX, CX
	JZ      cvdone

cvloop:
	VMOVUPS     (SI), Y8
	VMOVAPS     Y4, Y9
	VFMADD231PS Y5, Y0, Y9
	VFMADD231PS Y6, Y1, Y9
	VFMADD231PS Y7, Y2, Y9
	VFMADD231PS Y8, Y3, Y9
	VMOVUPS     Y9, (DI)
	VMOVAPS     Y6, Y5
	VMOVAPS     Y7, Y6
	VMOVAPS     Y8, Y7
	ADDQ        R8, SI
	ADDQ        R8, DI
	DECQ        CX
	JNZ         cvloop

cvdone:
	VMOVUPS Y5, (DX)
	VMOVUPS Y6, 32(DX)
	VMOVUPS Y7, 64(DX)
	VZEROUPPER
	RET
