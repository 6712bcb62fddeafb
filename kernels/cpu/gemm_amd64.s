//go:build amd64

#include "textflag.h"

// Packed-GEMM kernels for MatMul at m >= gemmMinM (see gemm.go). Go assembler
// operand order: sources first, destination last.

// KSTEP does one k of the 6x16 microkernel: two vector loads of the packed
// panel (16 weight rows at this k) at boff(SI), six broadcasts of x[i][k] at
// xoff(Rn)(BX*1), twelve FMAs into Y0..Y11.
#define KSTEP(boff, boff2, xoff) \
	VMOVUPS      boff(SI), Y12         \
	VMOVUPS      boff2(SI), Y13        \
	VBROADCASTSS xoff(R8)(BX*1), Y14   \
	VFMADD231PS  Y14, Y12, Y0          \
	VFMADD231PS  Y14, Y13, Y1          \
	VBROADCASTSS xoff(R9)(BX*1), Y15   \
	VFMADD231PS  Y15, Y12, Y2          \
	VFMADD231PS  Y15, Y13, Y3          \
	VBROADCASTSS xoff(R10)(BX*1), Y14  \
	VFMADD231PS  Y14, Y12, Y4          \
	VFMADD231PS  Y14, Y13, Y5          \
	VBROADCASTSS xoff(R11)(BX*1), Y15  \
	VFMADD231PS  Y15, Y12, Y6          \
	VFMADD231PS  Y15, Y13, Y7          \
	VBROADCASTSS xoff(R12)(BX*1), Y14  \
	VFMADD231PS  Y14, Y12, Y8          \
	VFMADD231PS  Y14, Y13, Y9          \
	VBROADCASTSS xoff(R13)(BX*1), Y15  \
	VFMADD231PS  Y15, Y12, Y10         \
	VFMADD231PS  Y15, Y13, Y11

// STROW stores (or, in the add variant, accumulates) one 16-float row of the
// tile to (DI) and steps DI by the output stride DX.
#define STROW(a, b) \
	VMOVUPS a, (DI)    \
	VMOVUPS b, 32(DI)  \
	ADDQ    DX, DI

#define ADDROW(a, b) \
	VADDPS  (DI), a, a    \
	VADDPS  32(DI), b, b  \
	VMOVUPS a, (DI)       \
	VMOVUPS b, 32(DI)     \
	ADDQ    DX, DI

// func gemm6x16AVX(xp *[6]*float32, b *float32, kc int, c *float32, ldc int, acc int)
// c[i*ldc+j] (+)= Σ_{k<kc} xp[i][k]·b[k*16+j] for i < 6, j < 16; kc >= 1.
// acc != 0 adds to c, otherwise c is overwritten.
TEXT ·gemm6x16AVX(SB), NOSPLIT, $0-48
	MOVQ   xp+0(FP), AX
	MOVQ   0(AX), R8
	MOVQ   8(AX), R9
	MOVQ   16(AX), R10
	MOVQ   24(AX), R11
	MOVQ   32(AX), R12
	MOVQ   40(AX), R13
	MOVQ   b+8(FP), SI
	MOVQ   kc+16(FP), CX
	XORQ   BX, BX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

loop4:
	CMPQ CX, $4
	JL   loop1
	KSTEP(0, 32, 0)
	KSTEP(64, 96, 4)
	KSTEP(128, 160, 8)
	KSTEP(192, 224, 12)
	ADDQ $256, SI
	ADDQ $16, BX
	SUBQ $4, CX
	JMP  loop4

loop1:
	TESTQ CX, CX
	JZ    store
	KSTEP(0, 32, 0)
	ADDQ  $64, SI
	ADDQ  $4, BX
	DECQ  CX
	JMP   loop1

store:
	MOVQ  c+24(FP), DI
	MOVQ  ldc+32(FP), DX
	SHLQ  $2, DX
	MOVQ  acc+40(FP), AX
	TESTQ AX, AX
	JNZ   add
	STROW(Y0, Y1)
	STROW(Y2, Y3)
	STROW(Y4, Y5)
	STROW(Y6, Y7)
	STROW(Y8, Y9)
	STROW(Y10, Y11)
	VZEROUPPER
	RET

add:
	ADDROW(Y0, Y1)
	ADDROW(Y2, Y3)
	ADDROW(Y4, Y5)
	ADDROW(Y6, Y7)
	ADDROW(Y8, Y9)
	ADDROW(Y10, Y11)
	VZEROUPPER
	RET

// TRANSPOSE8 transposes the 8x8 floats in Y0..Y7 (Yr = row r, 8 consecutive
// k) and stores column k (8 rows) at k*64+off(DI). Clobbers Y0..Y15.
#define TRANSPOSE8(off) \
	VUNPCKLPS   Y1, Y0, Y8           \
	VUNPCKHPS   Y1, Y0, Y9           \
	VUNPCKLPS   Y3, Y2, Y10          \
	VUNPCKHPS   Y3, Y2, Y11          \
	VUNPCKLPS   Y5, Y4, Y12          \
	VUNPCKHPS   Y5, Y4, Y13          \
	VUNPCKLPS   Y7, Y6, Y14          \
	VUNPCKHPS   Y7, Y6, Y15          \
	VSHUFPS     $0x44, Y10, Y8, Y0   \
	VSHUFPS     $0xEE, Y10, Y8, Y1   \
	VSHUFPS     $0x44, Y11, Y9, Y2   \
	VSHUFPS     $0xEE, Y11, Y9, Y3   \
	VSHUFPS     $0x44, Y14, Y12, Y4  \
	VSHUFPS     $0xEE, Y14, Y12, Y5  \
	VSHUFPS     $0x44, Y15, Y13, Y6  \
	VSHUFPS     $0xEE, Y15, Y13, Y7  \
	VPERM2F128  $0x20, Y4, Y0, Y8    \
	VMOVUPS     Y8, off(DI)          \
	VPERM2F128  $0x20, Y5, Y1, Y9    \
	VMOVUPS     Y9, 64+off(DI)       \
	VPERM2F128  $0x20, Y6, Y2, Y10   \
	VMOVUPS     Y10, 128+off(DI)     \
	VPERM2F128  $0x20, Y7, Y3, Y11   \
	VMOVUPS     Y11, 192+off(DI)     \
	VPERM2F128  $0x31, Y4, Y0, Y12   \
	VMOVUPS     Y12, 256+off(DI)     \
	VPERM2F128  $0x31, Y5, Y1, Y13   \
	VMOVUPS     Y13, 320+off(DI)     \
	VPERM2F128  $0x31, Y6, Y2, Y14   \
	VMOVUPS     Y14, 384+off(DI)     \
	VPERM2F128  $0x31, Y7, Y3, Y15   \
	VMOVUPS     Y15, 448+off(DI)

// ROWPTRS sets AX, BX to rows 0 and 4 of the eight rows starting at base
// (row stride R8 bytes, R9 = 3*R8) and prefetches the same columns of the
// eight rows one panel (R11 = 16 rows) further on: a work item packs
// consecutive panels (gemm.go), so that is its next panel's data, fetched
// while this one is multiplied; the hardware prefetcher, which sees sixteen
// short strided streams, does not get ahead of them. Clobbers R12, R13.
#define ROWPTRS(base) \
	MOVQ       base, AX          \
	LEAQ       (AX)(R8*4), BX    \
	LEAQ       (AX)(R11*1), R12  \
	LEAQ       (BX)(R11*1), R13  \
	PREFETCHT0 (R12)             \
	PREFETCHT0 (R12)(R8*1)       \
	PREFETCHT0 (R12)(R8*2)       \
	PREFETCHT0 (R12)(R9*1)       \
	PREFETCHT0 (R13)             \
	PREFETCHT0 (R13)(R8*1)       \
	PREFETCHT0 (R13)(R8*2)       \
	PREFETCHT0 (R13)(R9*1)

// Loads of eight consecutive k from each of the eight rows at AX, BX into
// Y0..Y7, converted to f32.
#define LDF32 \
	VMOVUPS (AX), Y0       \
	VMOVUPS (AX)(R8*1), Y1       \
	VMOVUPS (AX)(R8*2), Y2       \
	VMOVUPS (AX)(R9*1), Y3       \
	VMOVUPS (BX), Y4             \
	VMOVUPS (BX)(R8*1), Y5       \
	VMOVUPS (BX)(R8*2), Y6       \
	VMOVUPS (BX)(R9*1), Y7

#define LDF16 \
	VCVTPH2PS (AX), Y0     \
	VCVTPH2PS (AX)(R8*1), Y1     \
	VCVTPH2PS (AX)(R8*2), Y2     \
	VCVTPH2PS (AX)(R9*1), Y3     \
	VCVTPH2PS (BX), Y4           \
	VCVTPH2PS (BX)(R8*1), Y5     \
	VCVTPH2PS (BX)(R8*2), Y6     \
	VCVTPH2PS (BX)(R9*1), Y7

#define LDBF1(src, r) \
	VPMOVZXWD src, r  \
	VPSLLD    $16, r, r

#define LDBF16 \
	LDBF1((AX), Y0)  \
	LDBF1((AX)(R8*1), Y1)  \
	LDBF1((AX)(R8*2), Y2)  \
	LDBF1((AX)(R9*1), Y3)  \
	LDBF1((BX), Y4)        \
	LDBF1((BX)(R8*1), Y5)  \
	LDBF1((BX)(R8*2), Y6)  \
	LDBF1((BX)(R9*1), Y7)

// The packers convert 16 weight rows (row j at src + j*stride bytes) × n8
// columns (n8 > 0, a multiple of 8) to f32, k-major: dst[k*16+j] = W[j][k].
// Each group of 8 columns is done as two 8×8 transposes (rows 0-7, 8-15).

// func pack16F32AVX(dst *float32, src *byte, stride, n8 int)
TEXT ·pack16F32AVX(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), R8
	MOVQ n8+24(FP), CX
	LEAQ (R8)(R8*2), R9   // 3*stride
	LEAQ (SI)(R8*8), R10  // row 8
	MOVQ R8, R11
	SHLQ $4, R11          // 16*stride: the next panel

loop:
	ROWPTRS(SI)
	LDF32
	TRANSPOSE8(0)
	ROWPTRS(R10)
	LDF32
	TRANSPOSE8(32)
	ADDQ $32, SI
	ADDQ $32, R10
	ADDQ $512, DI
	SUBQ $8, CX
	JNZ  loop
	VZEROUPPER
	RET

// func pack16F16AVX(dst *float32, src *byte, stride, n8 int)
TEXT ·pack16F16AVX(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), R8
	MOVQ n8+24(FP), CX
	LEAQ (R8)(R8*2), R9   // 3*stride
	LEAQ (SI)(R8*8), R10  // row 8
	MOVQ R8, R11
	SHLQ $4, R11          // 16*stride: the next panel

loop:
	ROWPTRS(SI)
	LDF16
	TRANSPOSE8(0)
	ROWPTRS(R10)
	LDF16
	TRANSPOSE8(32)
	ADDQ $16, SI
	ADDQ $16, R10
	ADDQ $512, DI
	SUBQ $8, CX
	JNZ  loop
	VZEROUPPER
	RET

// func pack16BF16AVX(dst *float32, src *byte, stride, n8 int)
TEXT ·pack16BF16AVX(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), R8
	MOVQ n8+24(FP), CX
	LEAQ (R8)(R8*2), R9   // 3*stride
	LEAQ (SI)(R8*8), R10  // row 8
	MOVQ R8, R11
	SHLQ $4, R11          // 16*stride: the next panel

loop:
	ROWPTRS(SI)
	LDBF16
	TRANSPOSE8(0)
	ROWPTRS(R10)
	LDBF16
	TRANSPOSE8(32)
	ADDQ $16, SI
	ADDQ $16, R10
	ADDQ $512, DI
	SUBQ $8, CX
	JNZ  loop
	VZEROUPPER
	RET
