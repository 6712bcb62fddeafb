//go:build amd64

#include "textflag.h"
#include "rows_amd64.h"

// Attention microkernels (attn_tile.go): c[i*ldc+j] (+)= Σ_{k<kc}
// x[i*xs+k]·b[k*ldb+j] for j < 16 and 1, 4 or 12 rows i. b is a 16-column
// strip of a row-major matrix with row stride ldb (a packed key panel, or
// rows of values): the same broadcast-FMA scheme as the GEMM kernels, with
// the strip stride a parameter. Go assembler operand order: sources first,
// destination last. kc >= 1.

// func attnTile1AVX(x *float32, b *float32, ldb, kc int, c *float32, acc int)
TEXT ·attnTile1AVX(SB), NOSPLIT, $0-48
	MOVQ   x+0(FP), R8
	MOVQ   b+8(FP), SI
	MOVQ   ldb+16(FP), BX
	SHLQ   $2, BX
	MOVQ   kc+24(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

t1loop2:
	CMPQ         CX, $2
	JL           t1loop1
	VBROADCASTSS (R8), Y10
	VFMADD231PS  (SI), Y10, Y0
	VFMADD231PS  32(SI), Y10, Y1
	VBROADCASTSS 4(R8), Y11
	VFMADD231PS  (SI)(BX*1), Y11, Y2
	VFMADD231PS  32(SI)(BX*1), Y11, Y3
	LEAQ         (SI)(BX*2), SI
	ADDQ         $8, R8
	SUBQ         $2, CX
	JMP          t1loop2

t1loop1:
	TESTQ        CX, CX
	JZ           t1store
	VBROADCASTSS (R8), Y10
	VFMADD231PS  (SI), Y10, Y0
	VFMADD231PS  32(SI), Y10, Y1

t1store:
	VADDPS Y2, Y0, Y0
	VADDPS Y3, Y1, Y1
	MOVQ   c+32(FP), DI
	MOVQ   acc+40(FP), AX
	TESTQ  AX, AX
	JZ     t1st
	VADDPS (DI), Y0, Y0
	VADDPS 32(DI), Y1, Y1

t1st:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VZEROUPPER
	RET

// T4K does one k of the 4-row kernel: the strip row at (SI) in Y8/Y9, four
// broadcasts of x[i][k] (rows R8, R9, R10, R11 at byte offset AX), eight
// FMAs into Y0..Y7.
#define T4K \
	VMOVUPS      (SI), Y8           \
	VMOVUPS      32(SI), Y9         \
	VBROADCASTSS (R8)(AX*1), Y10    \
	VFMADD231PS  Y10, Y8, Y0        \
	VFMADD231PS  Y10, Y9, Y1        \
	VBROADCASTSS (R9)(AX*1), Y11    \
	VFMADD231PS  Y11, Y8, Y2        \
	VFMADD231PS  Y11, Y9, Y3        \
	VBROADCASTSS (R10)(AX*1), Y12   \
	VFMADD231PS  Y12, Y8, Y4        \
	VFMADD231PS  Y12, Y9, Y5        \
	VBROADCASTSS (R11)(AX*1), Y13   \
	VFMADD231PS  Y13, Y8, Y6        \
	VFMADD231PS  Y13, Y9, Y7        \
	ADDQ         BX, SI             \
	ADDQ         $4, AX

#define T4ST(a, b) \
	VMOVUPS a, (DI)    \
	VMOVUPS b, 32(DI)  \
	ADDQ    DX, DI

#define T4ADD(a, b) \
	VADDPS  (DI), a, a    \
	VADDPS  32(DI), b, b  \
	VMOVUPS a, (DI)       \
	VMOVUPS b, 32(DI)     \
	ADDQ    DX, DI

// func attnTile4AVX(x *float32, xs int, b *float32, ldb, kc int, c *float32, ldc int, acc int)
TEXT ·attnTile4AVX(SB), NOSPLIT, $0-64
	MOVQ   x+0(FP), R8
	MOVQ   xs+8(FP), DX
	SHLQ   $2, DX
	LEAQ   (R8)(DX*1), R9
	LEAQ   (R9)(DX*1), R10
	LEAQ   (R10)(DX*1), R11
	MOVQ   b+16(FP), SI
	MOVQ   ldb+24(FP), BX
	SHLQ   $2, BX
	MOVQ   kc+32(FP), CX
	XORQ   AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

t4loop:
	T4K
	DECQ CX
	JNZ  t4loop

	MOVQ  c+40(FP), DI
	MOVQ  ldc+48(FP), DX
	SHLQ  $2, DX
	MOVQ  acc+56(FP), AX
	TESTQ AX, AX
	JNZ   t4add
	T4ST(Y0, Y1)
	T4ST(Y2, Y3)
	T4ST(Y4, Y5)
	T4ST(Y6, Y7)
	VZEROUPPER
	RET

t4add:
	T4ADD(Y0, Y1)
	T4ADD(Y2, Y3)
	T4ADD(Y4, Y5)
	T4ADD(Y6, Y7)
	VZEROUPPER
	RET

// T12K does one k of the 12-row AVX-512 kernel: one load of the strip row
// at boff(SI) into zr, twelve broadcast-FMAs of x[i][k] (rows at R8, R9,
// R10 + {0,1,2,3}·AX, byte offset xoff).
#define T12K(boff, xoff, zr) \
	VMOVUPS          boff, zr                 \
	VFMADD231PS.BCST xoff(R8), zr, Z0         \
	VFMADD231PS.BCST xoff(R8)(AX*1), zr, Z1   \
	VFMADD231PS.BCST xoff(R8)(AX*2), zr, Z2   \
	VFMADD231PS.BCST xoff(R8)(DX*1), zr, Z3   \
	VFMADD231PS.BCST xoff(R9), zr, Z4         \
	VFMADD231PS.BCST xoff(R9)(AX*1), zr, Z5   \
	VFMADD231PS.BCST xoff(R9)(AX*2), zr, Z6   \
	VFMADD231PS.BCST xoff(R9)(DX*1), zr, Z7   \
	VFMADD231PS.BCST xoff(R10), zr, Z8        \
	VFMADD231PS.BCST xoff(R10)(AX*1), zr, Z9  \
	VFMADD231PS.BCST xoff(R10)(AX*2), zr, Z10 \
	VFMADD231PS.BCST xoff(R10)(DX*1), zr, Z11

#define T12ST(z) \
	VMOVUPS z, (DI) \
	ADDQ    BX, DI

#define T12ADD(z) \
	VADDPS  (DI), z, z \
	VMOVUPS z, (DI)    \
	ADDQ    BX, DI

// func attnTile12AVX512(x *float32, xs int, b *float32, ldb, kc int, c *float32, ldc int, acc int)
TEXT ·attnTile12AVX512(SB), NOSPLIT, $0-64
	MOVQ   x+0(FP), R8
	MOVQ   xs+8(FP), AX
	SHLQ   $2, AX
	LEAQ   (AX)(AX*2), DX
	LEAQ   (R8)(AX*4), R9
	LEAQ   (R9)(AX*4), R10
	MOVQ   b+16(FP), SI
	MOVQ   ldb+24(FP), BX
	SHLQ   $2, BX
	MOVQ   kc+32(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11

t12loop2:
	CMPQ CX, $2
	JL   t12loop1
	T12K((SI), 0, Z24)
	T12K((SI)(BX*1), 4, Z25)
	LEAQ (SI)(BX*2), SI
	ADDQ $8, R8
	ADDQ $8, R9
	ADDQ $8, R10
	SUBQ $2, CX
	JMP  t12loop2

t12loop1:
	TESTQ CX, CX
	JZ    t12store
	T12K((SI), 0, Z24)

t12store:
	MOVQ  c+40(FP), DI
	MOVQ  ldc+48(FP), BX
	SHLQ  $2, BX
	MOVQ  acc+56(FP), AX
	TESTQ AX, AX
	JNZ   t12add
	T12ST(Z0)
	T12ST(Z1)
	T12ST(Z2)
	T12ST(Z3)
	T12ST(Z4)
	T12ST(Z5)
	T12ST(Z6)
	T12ST(Z7)
	T12ST(Z8)
	T12ST(Z9)
	T12ST(Z10)
	T12ST(Z11)
	VZEROUPPER
	RET

t12add:
	T12ADD(Z0)
	T12ADD(Z1)
	T12ADD(Z2)
	T12ADD(Z3)
	T12ADD(Z4)
	T12ADD(Z5)
	T12ADD(Z6)
	T12ADD(Z7)
	T12ADD(Z8)
	T12ADD(Z9)
	T12ADD(Z10)
	T12ADD(Z11)
	VZEROUPPER
	RET

// AX4BODY(LD, eb) adds a0..a3 (Y12..Y15) times four rows (SI, R8, R9, R10;
// eb bytes per element, loaded by LD) to y (DI), eight elements a step.
#define AX4BODY(LD, eb) \
ax4loop:                           \
	CMPQ        CX, $8         \
	JL          ax4done        \
	LD((SI), Y1)               \
	LD((R8), Y2)               \
	LD((R9), Y3)               \
	LD((R10), Y4)              \
	VMOVUPS     (DI), Y0       \
	VFMADD231PS Y1, Y12, Y0    \
	VFMADD231PS Y2, Y13, Y0    \
	VFMADD231PS Y3, Y14, Y0    \
	VFMADD231PS Y4, Y15, Y0    \
	VMOVUPS     Y0, (DI)       \
	ADDQ        $32, DI        \
	ADDQ        $(8*eb), SI    \
	ADDQ        $(8*eb), R8    \
	ADDQ        $(8*eb), R9    \
	ADDQ        $(8*eb), R10   \
	SUBQ        $8, CX         \
	JMP         ax4loop        \
ax4done:                           \
	VZEROUPPER                 \
	RET

// func axpy4F16AVX(y *float32, x *byte, xs int, a *[4]float32, n int)
// y[i] += Σ_j a[j]·x_j[i] for four binary16 rows x_j = x + j·xs (bytes);
// n is a multiple of 8: four value rows of attention per pass over y.
TEXT ·axpy4F16AVX(SB), NOSPLIT, $0-40

// AX4ARGS loads the axpy4 kernels' arguments: y in DI, the four rows at
// SI, R8, R9, R10, the four weights broadcast in Y12–Y15, n in CX.
#define AX4ARGS \
	MOVQ         y+0(FP), DI   \
	MOVQ         x+8(FP), SI   \
	MOVQ         xs+16(FP), AX \
	MOVQ         a+24(FP), DX  \
	MOVQ         n+32(FP), CX  \
	ROWPTRS                    \
	VBROADCASTSS (DX), Y12     \
	VBROADCASTSS 4(DX), Y13    \
	VBROADCASTSS 8(DX), Y14    \
	VBROADCASTSS 12(DX), Y15

	AX4ARGS
	AX4BODY(LDF16, 2)

// func axpy4BF16AVX(y *float32, x *byte, xs int, a *[4]float32, n int)
// As axpy4F16AVX for bfloat16 rows.
TEXT ·axpy4BF16AVX(SB), NOSPLIT, $0-40
	AX4ARGS
	AX4BODY(LDBF16, 2)

// func prefetchRowsAsm(p *byte, rb, rows, n int)
// PREFETCHT0 of every cache line of rows rows of n bytes (n >= 1), row i at
// p + i·rb: a page run of one head's keys or values, fetched while the run
// before it is read (each run is a page of its own, out of the hardware
// prefetcher's stride).
TEXT ·prefetchRowsAsm(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ rb+8(FP), AX
	MOVQ rows+16(FP), CX
	MOVQ n+24(FP), DX
	TESTQ CX, CX
	JLE  pfdone

pfrow:
	XORQ BX, BX

pfline:
	PREFETCHT0 (SI)(BX*1)
	ADDQ       $64, BX
	CMPQ       BX, DX
	JL         pfline
	PREFETCHT0 -1(SI)(DX*1) // the last byte's line when p is not line-aligned
	ADDQ       AX, SI
	DECQ       CX
	JNZ        pfrow

pfdone:
	RET
