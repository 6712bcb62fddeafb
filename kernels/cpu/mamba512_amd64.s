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
	JL    zr64
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

// Below 128 columns one accumulator per 16 columns would wait on its own
// FMA's latency at every row: rows alternate between two sets instead.
zr64:
	CMPQ  CX, $64
	JL    zr16
	TESTL AX, AX
	JZ    zr64z
	VMULPS (DI), Z13, Z0
	VMULPS 64(DI), Z13, Z1
	VMULPS 128(DI), Z13, Z2
	VMULPS 192(DI), Z13, Z3
	JMP    zr64k

zr64z:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3

zr64k:
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	MOVQ   SI, R11
	MOVQ   DX, R12
	MOVQ   R10, BX

zr64l2:
	CMPQ         BX, $2
	JL           zr64l1
	VBROADCASTSS (R11), Z12
	VBROADCASTSS (R11)(R8*1), Z14
	LEAQ         (R12)(R9*1), R13
	VFMADD231PS  (R12), Z12, Z0
	VFMADD231PS  64(R12), Z12, Z1
	VFMADD231PS  128(R12), Z12, Z2
	VFMADD231PS  192(R12), Z12, Z3
	VFMADD231PS  (R13), Z14, Z4
	VFMADD231PS  64(R13), Z14, Z5
	VFMADD231PS  128(R13), Z14, Z6
	VFMADD231PS  192(R13), Z14, Z7
	LEAQ         (R11)(R8*2), R11
	LEAQ         (R12)(R9*2), R12
	SUBQ         $2, BX
	JMP          zr64l2

zr64l1:
	TESTQ        BX, BX
	JZ           zr64s
	VBROADCASTSS (R11), Z12
	VFMADD231PS  (R12), Z12, Z0
	VFMADD231PS  64(R12), Z12, Z1
	VFMADD231PS  128(R12), Z12, Z2
	VFMADD231PS  192(R12), Z12, Z3

zr64s:
	VADDPS  Z4, Z0, Z0
	VADDPS  Z5, Z1, Z1
	VADDPS  Z6, Z2, Z2
	VADDPS  Z7, Z3, Z3
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	ADDQ    $256, DI
	ADDQ    $256, DX
	SUBQ    $64, CX
	JMP     zr64

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
	VPXORD Z4, Z4, Z4
	MOVQ   SI, R11
	MOVQ   DX, R12
	MOVQ   R10, BX

zr16l2:
	CMPQ         BX, $2
	JL           zr16l1
	VBROADCASTSS (R11), Z12
	VBROADCASTSS (R11)(R8*1), Z14
	VFMADD231PS  (R12), Z12, Z0
	VFMADD231PS  (R12)(R9*1), Z14, Z4
	LEAQ         (R11)(R8*2), R11
	LEAQ         (R12)(R9*2), R12
	SUBQ         $2, BX
	JMP          zr16l2

zr16l1:
	TESTQ        BX, BX
	JZ           zr16s
	VBROADCASTSS (R11), Z12
	VFMADD231PS  (R12), Z12, Z0

zr16s:
	VADDPS  Z4, Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ    $64, DI
	ADDQ    $64, DX
	SUBQ    $16, CX
	JMP     zr16

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

// The 4-row variant: four output rows (os floats apart) share every row of
// r, so each loaded vector feeds four FMAs. A 64-column block keeps its 16
// accumulators in Z16-Z31.

// func axpyRows4AVX512(out *float32, os, l int, beta *[4]float32, a *float32, ak, as int, r *float32, rs, m, keep int)
TEXT ·axpyRows4AVX512(SB), NOSPLIT, $0-88
	MOVQ         out+0(FP), DI
	MOVQ         l+16(FP), CX
	MOVQ         beta+24(FP), AX
	VBROADCASTSS (AX), Z8
	VBROADCASTSS 4(AX), Z9
	VBROADCASTSS 8(AX), Z10
	VBROADCASTSS 12(AX), Z11
	MOVQ         a+32(FP), SI
	MOVQ         ak+40(FP), R9
	SHLQ         $2, R9
	LEAQ         (R9)(R9*2), AX        // 3·ak in bytes
	MOVQ         as+48(FP), R10
	SHLQ         $2, R10
	MOVQ         r+56(FP), DX
	MOVQ         rs+64(FP), R11
	SHLQ         $2, R11
	MOVQ         m+72(FP), R12

q64:
	CMPQ  CX, $64
	JL    q16
	MOVQ  os+8(FP), R8
	SHLQ  $2, R8
	LEAQ  (DI)(R8*2), R13
	MOVQ  keep+80(FP), BX
	TESTQ BX, BX
	JZ    q64z
	VMULPS (DI), Z8, Z16
	VMULPS 64(DI), Z8, Z17
	VMULPS 128(DI), Z8, Z18
	VMULPS 192(DI), Z8, Z19
	VMULPS (DI)(R8*1), Z9, Z20
	VMULPS 64(DI)(R8*1), Z9, Z21
	VMULPS 128(DI)(R8*1), Z9, Z22
	VMULPS 192(DI)(R8*1), Z9, Z23
	VMULPS (R13), Z10, Z24
	VMULPS 64(R13), Z10, Z25
	VMULPS 128(R13), Z10, Z26
	VMULPS 192(R13), Z10, Z27
	VMULPS (R13)(R8*1), Z11, Z28
	VMULPS 64(R13)(R8*1), Z11, Z29
	VMULPS 128(R13)(R8*1), Z11, Z30
	VMULPS 192(R13)(R8*1), Z11, Z31
	JMP q64k

q64z:
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27
	VPXORD Z28, Z28, Z28
	VPXORD Z29, Z29, Z29
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31

q64k:
	MOVQ SI, R13
	MOVQ DX, BX
	MOVQ R12, R8

q64l:
	VMOVUPS      (BX), Z0
	VMOVUPS      64(BX), Z1
	VMOVUPS      128(BX), Z2
	VMOVUPS      192(BX), Z3
	VBROADCASTSS (R13), Z4
	VBROADCASTSS (R13)(R9*1), Z5
	VBROADCASTSS (R13)(R9*2), Z6
	VBROADCASTSS (R13)(AX*1), Z7
	VFMADD231PS Z0, Z4, Z16
	VFMADD231PS Z1, Z4, Z17
	VFMADD231PS Z2, Z4, Z18
	VFMADD231PS Z3, Z4, Z19
	VFMADD231PS Z0, Z5, Z20
	VFMADD231PS Z1, Z5, Z21
	VFMADD231PS Z2, Z5, Z22
	VFMADD231PS Z3, Z5, Z23
	VFMADD231PS Z0, Z6, Z24
	VFMADD231PS Z1, Z6, Z25
	VFMADD231PS Z2, Z6, Z26
	VFMADD231PS Z3, Z6, Z27
	VFMADD231PS Z0, Z7, Z28
	VFMADD231PS Z1, Z7, Z29
	VFMADD231PS Z2, Z7, Z30
	VFMADD231PS Z3, Z7, Z31
	ADDQ         R10, R13
	ADDQ         R11, BX
	DECQ         R8
	JNZ          q64l
	MOVQ         os+8(FP), R8
	SHLQ         $2, R8
	LEAQ         (DI)(R8*2), R13
	VMOVUPS Z16, (DI)
	VMOVUPS Z17, 64(DI)
	VMOVUPS Z18, 128(DI)
	VMOVUPS Z19, 192(DI)
	VMOVUPS Z20, (DI)(R8*1)
	VMOVUPS Z21, 64(DI)(R8*1)
	VMOVUPS Z22, 128(DI)(R8*1)
	VMOVUPS Z23, 192(DI)(R8*1)
	VMOVUPS Z24, (R13)
	VMOVUPS Z25, 64(R13)
	VMOVUPS Z26, 128(R13)
	VMOVUPS Z27, 192(R13)
	VMOVUPS Z28, (R13)(R8*1)
	VMOVUPS Z29, 64(R13)(R8*1)
	VMOVUPS Z30, 128(R13)(R8*1)
	VMOVUPS Z31, 192(R13)(R8*1)
	ADDQ $256, DI
	ADDQ $256, DX
	SUBQ $64, CX
	JMP  q64

q16:
	CMPQ  CX, $16
	JL    qdone
	MOVQ  os+8(FP), R8
	SHLQ  $2, R8
	LEAQ  (DI)(R8*2), R13
	MOVQ  keep+80(FP), BX
	TESTQ BX, BX
	JZ    q16z
	VMULPS (DI), Z8, Z16
	VMULPS (DI)(R8*1), Z9, Z20
	VMULPS (R13), Z10, Z24
	VMULPS (R13)(R8*1), Z11, Z28
	JMP    q16k

q16z:
	VPXORD Z16, Z16, Z16
	VPXORD Z20, Z20, Z20
	VPXORD Z24, Z24, Z24
	VPXORD Z28, Z28, Z28

q16k:
	MOVQ SI, R13
	MOVQ DX, BX
	MOVQ R12, R8

q16l:
	VMOVUPS      (BX), Z0
	VBROADCASTSS (R13), Z4
	VBROADCASTSS (R13)(R9*1), Z5
	VBROADCASTSS (R13)(R9*2), Z6
	VBROADCASTSS (R13)(AX*1), Z7
	VFMADD231PS  Z0, Z4, Z16
	VFMADD231PS  Z0, Z5, Z20
	VFMADD231PS  Z0, Z6, Z24
	VFMADD231PS  Z0, Z7, Z28
	ADDQ         R10, R13
	ADDQ         R11, BX
	DECQ         R8
	JNZ          q16l
	MOVQ         os+8(FP), R8
	SHLQ         $2, R8
	LEAQ         (DI)(R8*2), R13
	VMOVUPS      Z16, (DI)
	VMOVUPS      Z20, (DI)(R8*1)
	VMOVUPS      Z24, (R13)
	VMOVUPS      Z28, (R13)(R8*1)
	ADDQ         $64, DI
	ADDQ         $64, DX
	SUBQ         $16, CX
	JMP          q16

qdone:
	VZEROUPPER
	RET
