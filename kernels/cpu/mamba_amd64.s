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
	JL    ar32
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

// Below 64 columns rows alternate between two sets of accumulators, so
// that no accumulator waits on its own FMA at every row.
ar32:
	CMPQ  CX, $32
	JL    ar8
	TESTL AX, AX
	JZ    ar32z
	VMULPS (DI), Y13, Y0
	VMULPS 32(DI), Y13, Y1
	VMULPS 64(DI), Y13, Y2
	VMULPS 96(DI), Y13, Y3
	JMP    ar32k

ar32z:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

ar32k:
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	MOVQ   SI, R11
	MOVQ   DX, R12
	MOVQ   R10, BX

ar32l2:
	CMPQ         BX, $2
	JL           ar32l1
	VBROADCASTSS (R11), Y12
	VBROADCASTSS (R11)(R8*1), Y14
	LEAQ         (R12)(R9*1), R13
	VFMADD231PS  (R12), Y12, Y0
	VFMADD231PS  32(R12), Y12, Y1
	VFMADD231PS  64(R12), Y12, Y2
	VFMADD231PS  96(R12), Y12, Y3
	VFMADD231PS  (R13), Y14, Y4
	VFMADD231PS  32(R13), Y14, Y5
	VFMADD231PS  64(R13), Y14, Y6
	VFMADD231PS  96(R13), Y14, Y7
	LEAQ         (R11)(R8*2), R11
	LEAQ         (R12)(R9*2), R12
	SUBQ         $2, BX
	JMP          ar32l2

ar32l1:
	TESTQ        BX, BX
	JZ           ar32s
	VBROADCASTSS (R11), Y12
	VFMADD231PS  (R12), Y12, Y0
	VFMADD231PS  32(R12), Y12, Y1
	VFMADD231PS  64(R12), Y12, Y2
	VFMADD231PS  96(R12), Y12, Y3

ar32s:
	VADDPS  Y4, Y0, Y0
	VADDPS  Y5, Y1, Y1
	VADDPS  Y6, Y2, Y2
	VADDPS  Y7, Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, DI
	ADDQ    $128, DX
	SUBQ    $32, CX
	JMP     ar32

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
	VXORPS Y4, Y4, Y4
	MOVQ   SI, R11
	MOVQ   DX, R12
	MOVQ   R10, BX

ar8l2:
	CMPQ         BX, $2
	JL           ar8l1
	VBROADCASTSS (R11), Y12
	VBROADCASTSS (R11)(R8*1), Y14
	VFMADD231PS  (R12), Y12, Y0
	VFMADD231PS  (R12)(R9*1), Y14, Y4
	LEAQ         (R11)(R8*2), R11
	LEAQ         (R12)(R9*2), R12
	SUBQ         $2, BX
	JMP          ar8l2

ar8l1:
	TESTQ        BX, BX
	JZ           ar8s
	VBROADCASTSS (R11), Y12
	VFMADD231PS  (R12), Y12, Y0

ar8s:
	VADDPS  Y4, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	ADDQ    $32, DX
	SUBQ    $8, CX
	JMP     ar8

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

// func conv4RowsAVX(out, x *float32, stride, n, nb int, wt *[4][8]float32, bias *[8]float32, win *[3][8]float32)
// Row by row, nb blocks of eight channels each: acc = bias + Σ_k wt[k]·u_k
// with u = the block's window (three vectors) then x; the window shifts in
// memory (it stays in L1: nb ≤ 32 blocks).
TEXT ·conv4RowsAVX(SB), NOSPLIT, $0-64
	MOVQ out+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ stride+16(FP), R8
	SHLQ $2, R8
	MOVQ n+24(FP), CX
	MOVQ nb+32(FP), R9

cvrow:
	TESTQ CX, CX
	JZ    cvdone
	MOVQ  wt+40(FP), AX
	MOVQ  bias+48(FP), BX
	MOVQ  win+56(FP), DX
	MOVQ  DI, R10
	MOVQ  SI, R11
	MOVQ  R9, R12

cvblk:
	VMOVUPS     (R11), Y8
	VMOVUPS     (BX), Y9
	VMOVUPS     (DX), Y5
	VMOVUPS     32(DX), Y6
	VMOVUPS     64(DX), Y7
	VFMADD231PS (AX), Y5, Y9
	VFMADD231PS 32(AX), Y6, Y9
	VFMADD231PS 64(AX), Y7, Y9
	VFMADD231PS 96(AX), Y8, Y9
	VMOVUPS     Y9, (R10)
	VMOVUPS     Y6, (DX)
	VMOVUPS     Y7, 32(DX)
	VMOVUPS     Y8, 64(DX)
	ADDQ        $128, AX
	ADDQ        $32, BX
	ADDQ        $96, DX
	ADDQ        $32, R10
	ADDQ        $32, R11
	DECQ        R12
	JNZ         cvblk
	ADDQ        R8, DI
	ADDQ        R8, SI
	DECQ        CX
	JMP         cvrow

cvdone:
	VZEROUPPER
	RET

// The 4-row variant (see mamba512_amd64.s): a 16-column block keeps its
// eight accumulators in Y0-Y7 (row k in Y2k, Y2k+1).

// func axpyRows4AVX(out *float32, os, l int, beta *[4]float32, a *float32, ak, as int, r *float32, rs, m, keep int)
TEXT ·axpyRows4AVX(SB), NOSPLIT, $0-88
	MOVQ out+0(FP), DI
	MOVQ l+16(FP), CX
	MOVQ a+32(FP), SI
	MOVQ ak+40(FP), R9
	SHLQ $2, R9
	LEAQ (R9)(R9*2), AX
	MOVQ as+48(FP), R10
	SHLQ $2, R10
	MOVQ r+56(FP), DX
	MOVQ rs+64(FP), R11
	SHLQ $2, R11
	MOVQ m+72(FP), R12

y16:
	CMPQ  CX, $16
	JL    y8
	MOVQ  os+8(FP), R8
	SHLQ  $2, R8
	LEAQ  (DI)(R8*2), R13
	MOVQ  keep+80(FP), BX
	TESTQ BX, BX
	JZ    y16z
	MOVQ  beta+24(FP), BX
	VBROADCASTSS (BX), Y14
	VMULPS (DI), Y14, Y0
	VMULPS 32(DI), Y14, Y1
	VBROADCASTSS 4(BX), Y14
	VMULPS (DI)(R8*1), Y14, Y2
	VMULPS 32(DI)(R8*1), Y14, Y3
	VBROADCASTSS 8(BX), Y14
	VMULPS (R13), Y14, Y4
	VMULPS 32(R13), Y14, Y5
	VBROADCASTSS 12(BX), Y14
	VMULPS (R13)(R8*1), Y14, Y6
	VMULPS 32(R13)(R8*1), Y14, Y7
	JMP y16k

y16z:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

y16k:
	MOVQ SI, R13
	MOVQ DX, BX
	MOVQ R12, R8

y16l:
	VMOVUPS      (BX), Y8
	VMOVUPS      32(BX), Y9
	VBROADCASTSS (R13), Y10
	VBROADCASTSS (R13)(R9*1), Y11
	VBROADCASTSS (R13)(R9*2), Y12
	VBROADCASTSS (R13)(AX*1), Y13
	VFMADD231PS Y8, Y10, Y0
	VFMADD231PS Y9, Y10, Y1
	VFMADD231PS Y8, Y11, Y2
	VFMADD231PS Y9, Y11, Y3
	VFMADD231PS Y8, Y12, Y4
	VFMADD231PS Y9, Y12, Y5
	VFMADD231PS Y8, Y13, Y6
	VFMADD231PS Y9, Y13, Y7
	ADDQ R10, R13
	ADDQ R11, BX
	DECQ R8
	JNZ  y16l
	MOVQ os+8(FP), R8
	SHLQ $2, R8
	LEAQ (DI)(R8*2), R13
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, (DI)(R8*1)
	VMOVUPS Y3, 32(DI)(R8*1)
	VMOVUPS Y4, (R13)
	VMOVUPS Y5, 32(R13)
	VMOVUPS Y6, (R13)(R8*1)
	VMOVUPS Y7, 32(R13)(R8*1)
	ADDQ $64, DI
	ADDQ $64, DX
	SUBQ $16, CX
	JMP  y16

y8:
	CMPQ  CX, $8
	JL    ydone
	MOVQ  os+8(FP), R8
	SHLQ  $2, R8
	LEAQ  (DI)(R8*2), R13
	MOVQ  keep+80(FP), BX
	TESTQ BX, BX
	JZ    y8z
	MOVQ  beta+24(FP), BX
	VBROADCASTSS (BX), Y14
	VMULPS (DI), Y14, Y0
	VBROADCASTSS 4(BX), Y14
	VMULPS (DI)(R8*1), Y14, Y2
	VBROADCASTSS 8(BX), Y14
	VMULPS (R13), Y14, Y4
	VBROADCASTSS 12(BX), Y14
	VMULPS (R13)(R8*1), Y14, Y6
	JMP y8k

y8z:
	VXORPS Y0, Y0, Y0
	VXORPS Y2, Y2, Y2
	VXORPS Y4, Y4, Y4
	VXORPS Y6, Y6, Y6

y8k:
	MOVQ SI, R13
	MOVQ DX, BX
	MOVQ R12, R8

y8l:
	VMOVUPS      (BX), Y8
	VBROADCASTSS (R13), Y10
	VBROADCASTSS (R13)(R9*1), Y11
	VBROADCASTSS (R13)(R9*2), Y12
	VBROADCASTSS (R13)(AX*1), Y13
	VFMADD231PS  Y8, Y10, Y0
	VFMADD231PS  Y8, Y11, Y2
	VFMADD231PS  Y8, Y12, Y4
	VFMADD231PS  Y8, Y13, Y6
	ADDQ         R10, R13
	ADDQ         R11, BX
	DECQ         R8
	JNZ          y8l
	MOVQ         os+8(FP), R8
	SHLQ         $2, R8
	LEAQ         (DI)(R8*2), R13
	VMOVUPS      Y0, (DI)
	VMOVUPS      Y2, (DI)(R8*1)
	VMOVUPS      Y4, (R13)
	VMOVUPS      Y6, (R13)(R8*1)
	ADDQ         $32, DI
	ADDQ         $32, DX
	SUBQ         $8, CX
	JMP          y8

ydone:
	VZEROUPPER
	RET
