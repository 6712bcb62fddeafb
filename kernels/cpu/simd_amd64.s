//go:build amd64

#include "textflag.h"
#include "rows_amd64.h"

// AVX2/FMA/F16C dot-product kernels. Go assembler operand order: sources
// first, destination last (VFMADD231PS m, a, acc computes acc += a*m).

// HSUM1 reduces Y0 into X0's low float.
#define HSUM1 \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS       X1, X0, X0 \
	VHADDPS      X0, X0, X0 \
	VHADDPS      X0, X0, X0

// FOURPTRS sets DI,R8,R9,R10 to x, x+xs, x+2xs, x+3xs (xs in floats, in AX).
#define FOURPTRS \
	SHLQ $2, AX            \
	LEAQ (DI)(AX*1), R8    \
	LEAQ (R8)(AX*1), R9    \
	LEAQ (R9)(AX*1), R10

#define ZERO8 \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7

#define FOLD8 \
	VADDPS Y4, Y0, Y0 \
	VADDPS Y5, Y1, Y1 \
	VADDPS Y6, Y2, Y2 \
	VADDPS Y7, Y3, Y3

// FMA4 accumulates weight vector wr (8 floats) times the four x rows at byte
// offset off into accumulators a0..a3.
#define FMA4(off, wr, a0, a1, a2, a3) \
	VFMADD231PS off(DI), wr, a0  \
	VFMADD231PS off(R8), wr, a1  \
	VFMADD231PS off(R9), wr, a2  \
	VFMADD231PS off(R10), wr, a3

#define ADVX(n) \
	ADDQ $n, DI  \
	ADDQ $n, R8  \
	ADDQ $n, R9  \
	ADDQ $n, R10

// func dotF32AVX(a, b *float32, n int) float32
TEXT ·dotF32AVX(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

loop32:
	CMPQ        CX, $32
	JL          loop8
	VMOVUPS     (SI), Y4
	VMOVUPS     32(SI), Y5
	VMOVUPS     64(SI), Y6
	VMOVUPS     96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         loop32

loop8:
	CMPQ        CX, $8
	JL          done
	VMOVUPS     (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         loop8

done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM1
	VZEROUPPER
	MOVSS  X0, ret+24(FP)
	RET

// func dot4F32AVX(w, x *float32, xs, n int, out *[4]float32)
TEXT ·dot4F32AVX(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ xs+16(FP), AX
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	FOURPTRS
	ZERO8

loop16:
	CMPQ    CX, $16
	JL      loop8
	VMOVUPS (SI), Y8
	VMOVUPS 32(SI), Y9
	FMA4(0, Y8, Y0, Y1, Y2, Y3)
	FMA4(32, Y9, Y4, Y5, Y6, Y7)
	ADDQ    $64, SI
	ADVX(64)
	SUBQ    $16, CX
	JMP     loop16

loop8:
	CMPQ    CX, $8
	JL      done
	VMOVUPS (SI), Y8
	FMA4(0, Y8, Y0, Y1, Y2, Y3)
	ADDQ    $32, SI
	ADVX(32)
	SUBQ    $8, CX
	JMP     loop8

done:
	FOLD8
	HSUM4(DX)
	VZEROUPPER
	RET

// func dotF16AVX(w *byte, x *float32, n int) float32
TEXT ·dotF16AVX(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

loop32:
	CMPQ        CX, $32
	JL          loop8
	VCVTPH2PS   (SI), Y4
	VCVTPH2PS   16(SI), Y5
	VCVTPH2PS   32(SI), Y6
	VCVTPH2PS   48(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $64, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         loop32

loop8:
	CMPQ        CX, $8
	JL          done
	VCVTPH2PS   (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $16, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         loop8

done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM1
	VZEROUPPER
	MOVSS  X0, ret+24(FP)
	RET

// func dot4F16AVX(w *byte, x *float32, xs, n int, out *[4]float32)
TEXT ·dot4F16AVX(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ xs+16(FP), AX
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	FOURPTRS
	ZERO8

loop16:
	CMPQ      CX, $16
	JL        loop8
	VCVTPH2PS (SI), Y8
	VCVTPH2PS 16(SI), Y9
	FMA4(0, Y8, Y0, Y1, Y2, Y3)
	FMA4(32, Y9, Y4, Y5, Y6, Y7)
	ADDQ      $32, SI
	ADVX(64)
	SUBQ      $16, CX
	JMP       loop16

loop8:
	CMPQ      CX, $8
	JL        done
	VCVTPH2PS (SI), Y8
	FMA4(0, Y8, Y0, Y1, Y2, Y3)
	ADDQ      $16, SI
	ADVX(32)
	SUBQ      $8, CX
	JMP       loop8

done:
	FOLD8
	HSUM4(DX)
	VZEROUPPER
	RET

// func dotBF16AVX(w *byte, x *float32, n int) float32
TEXT ·dotBF16AVX(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

loop32:
	CMPQ        CX, $32
	JL          loop8
	VPMOVZXWD   (SI), Y4
	VPMOVZXWD   16(SI), Y5
	VPMOVZXWD   32(SI), Y6
	VPMOVZXWD   48(SI), Y7
	VPSLLD      $16, Y4, Y4
	VPSLLD      $16, Y5, Y5
	VPSLLD      $16, Y6, Y6
	VPSLLD      $16, Y7, Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $64, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         loop32

loop8:
	CMPQ        CX, $8
	JL          done
	VPMOVZXWD   (SI), Y4
	VPSLLD      $16, Y4, Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $16, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         loop8

done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM1
	VZEROUPPER
	MOVSS  X0, ret+24(FP)
	RET

// func dot4BF16AVX(w *byte, x *float32, xs, n int, out *[4]float32)
TEXT ·dot4BF16AVX(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ xs+16(FP), AX
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	FOURPTRS
	ZERO8

loop16:
	CMPQ      CX, $16
	JL        loop8
	VPMOVZXWD (SI), Y8
	VPMOVZXWD 16(SI), Y9
	VPSLLD    $16, Y8, Y8
	VPSLLD    $16, Y9, Y9
	FMA4(0, Y8, Y0, Y1, Y2, Y3)
	FMA4(32, Y9, Y4, Y5, Y6, Y7)
	ADDQ      $32, SI
	ADVX(64)
	SUBQ      $16, CX
	JMP       loop16

loop8:
	CMPQ      CX, $8
	JL        done
	VPMOVZXWD (SI), Y8
	VPSLLD    $16, Y8, Y8
	FMA4(0, Y8, Y0, Y1, Y2, Y3)
	ADDQ      $16, SI
	ADVX(32)
	SUBQ      $8, CX
	JMP       loop8

done:
	FOLD8
	HSUM4(DX)
	VZEROUPPER
	RET

// func axpyAVX(y, x *float32, a float32, n int)
TEXT ·axpyAVX(SB), NOSPLIT, $0-32
	MOVQ         y+0(FP), DI
	MOVQ         x+8(FP), SI
	VBROADCASTSS a+16(FP), Y0
	MOVQ         n+24(FP), CX

loop32:
	CMPQ        CX, $32
	JL          loop8
	VMOVUPS     (DI), Y1
	VMOVUPS     32(DI), Y2
	VMOVUPS     64(DI), Y3
	VMOVUPS     96(DI), Y4
	VFMADD231PS (SI), Y0, Y1
	VFMADD231PS 32(SI), Y0, Y2
	VFMADD231PS 64(SI), Y0, Y3
	VFMADD231PS 96(SI), Y0, Y4
	VMOVUPS     Y1, (DI)
	VMOVUPS     Y2, 32(DI)
	VMOVUPS     Y3, 64(DI)
	VMOVUPS     Y4, 96(DI)
	ADDQ        $128, DI
	ADDQ        $128, SI
	SUBQ        $32, CX
	JMP         loop32

loop8:
	CMPQ        CX, $8
	JL          done
	VMOVUPS     (DI), Y1
	VFMADD231PS (SI), Y0, Y1
	VMOVUPS     Y1, (DI)
	ADDQ        $32, DI
	ADDQ        $32, SI
	SUBQ        $8, CX
	JMP         loop8

done:
	VZEROUPPER
	RET

// HSUM4T reduces a0..a3 to four floats at off(DX), using Y12/Y13 as temps.
#define HSUM4T(a0, a1, a2, a3, off) \
	VHADDPS      a1, a0, Y12  \
	VHADDPS      a3, a2, Y13  \
	VHADDPS      Y13, Y12, Y12 \
	VEXTRACTF128 $1, Y12, X13 \
	VADDPS       X13, X12, X12 \
	VMOVUPS      X12, off(DX)

// FMA3(xr, a, b, c): load the x vector at (xr)(AX) into Y15 and multiply by the three
// weight vectors Y12..Y14 into accumulators a, b, c.
#define FMA3(xr, a, b, c) \
	VMOVUPS     (xr)(AX*1), Y15 \
	VFMADD231PS Y15, Y12, a      \
	VFMADD231PS Y15, Y13, b      \
	VFMADD231PS Y15, Y14, c

// MM3X4SETUP expects SI=w, DI=x, AX=xs, CX=n, DX=out.
#define MM3X4SETUP \
	FOURPTRS                 \
	ZERO8                    \
	VXORPS  Y8, Y8, Y8       \
	VXORPS  Y9, Y9, Y9       \
	VXORPS  Y10, Y10, Y10    \
	VXORPS  Y11, Y11, Y11    \
	XORQ    AX, AX           \
	XORQ    BX, BX

#define MM3X4BODY \
	FMA3(DI, Y0, Y4, Y8)  \
	FMA3(R8, Y1, Y5, Y9)  \
	FMA3(R9, Y2, Y6, Y10) \
	FMA3(R10, Y3, Y7, Y11)

#define MM3X4DONE \
	HSUM4T(Y0, Y1, Y2, Y3, 0)    \
	HSUM4T(Y4, Y5, Y6, Y7, 16)   \
	HSUM4T(Y8, Y9, Y10, Y11, 32) \
	VZEROUPPER

// func mm3x4F32AVX(w *float32, ws int, x *float32, xs, n int, out *[12]float32)
// out[r*4+i] = dot(w row r, x row i) for 3 weight rows (stride ws floats) and
// 4 x rows (stride xs floats); n > 0 and a multiple of 8. Twelve accumulators
// keep both FMA ports busy with 7 loads per 12 FMAs.
TEXT ·mm3x4F32AVX(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ x+16(FP), DI
	MOVQ xs+24(FP), AX
	MOVQ n+32(FP), CX
	MOVQ out+40(FP), DX
	MM3X4SETUP
	MOVQ ws+8(FP), R11
	SHLQ $2, R11
	LEAQ (SI)(R11*1), R12
	LEAQ (R12)(R11*1), R13
	MOVQ SI, R11
	MOVQ R12, SI
	MOVQ R13, R12
	// weight rows now at R11, SI, R12

loop:
	VMOVUPS (R11)(AX*1), Y12
	VMOVUPS (SI)(AX*1), Y13
	VMOVUPS (R12)(AX*1), Y14
	MM3X4BODY
	ADDQ    $32, AX
	SUBQ    $8, CX
	JNZ     loop
	MM3X4DONE
	RET

// func mm3x4F16AVX(w *byte, ws int, x *float32, xs, n int, out *[12]float32)
// As mm3x4F32AVX with f16 weights (ws in elements).
TEXT ·mm3x4F16AVX(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ x+16(FP), DI
	MOVQ xs+24(FP), AX
	MOVQ n+32(FP), CX
	MOVQ out+40(FP), DX
	MM3X4SETUP
	MOVQ ws+8(FP), R11
	SHLQ $1, R11
	LEAQ (SI)(R11*1), R12
	LEAQ (R12)(R11*1), R13
	MOVQ SI, R11
	MOVQ R12, SI
	MOVQ R13, R12

loop:
	VCVTPH2PS (R11)(BX*1), Y12
	VCVTPH2PS (SI)(BX*1), Y13
	VCVTPH2PS (R12)(BX*1), Y14
	MM3X4BODY
	ADDQ      $32, AX
	ADDQ      $16, BX
	SUBQ      $8, CX
	JNZ       loop
	MM3X4DONE
	RET

// Matrix-vector kernels over four consecutive weight rows (row stride rb
// bytes in AX) against one x: each x vector is loaded once for four rows, and
// the four sums are reduced together. n is a multiple of 8.

#define ADVW(n) \
	ADDQ $n, SI  \
	ADDQ $n, R8  \
	ADDQ $n, R9  \
	ADDQ $n, R10

// ROWS4(LD, eb) is the body of a rows4 kernel for weights of eb bytes
// (loaded by LD), once the arguments are in SI, AX, DI, CX, DX: 16 values a step (x in Y8/Y9, the four rows' weights in
// Y10–Y13, sums in Y0–Y3 and Y4–Y7), then 8, then the four sums to (DX).
// Each step also prefetches the same columns of the next four rows (R11 =
// 4·rb ahead): a decode matvec walks its rows in fours, so that is the next
// call's data, and the hardware prefetcher, which tracks each row as a short
// stream of its own, does not reach it in time (one f16 row of 768 columns
// is 24 cache lines). A prefetch past the matrix is harmless.
#define ROWS4(LD, eb) \
	ROWPTRS                    \
	LEAQ        (AX*4), R11    \
	ZERO8                      \
loop16:                            \
	CMPQ        CX, $16        \
	JL          loop8          \
	PREFETCHT0  (SI)(R11*1)    \
	PREFETCHT0  (R8)(R11*1)    \
	PREFETCHT0  (R9)(R11*1)    \
	PREFETCHT0  (R10)(R11*1)   \
	VMOVUPS     (DI), Y8       \
	VMOVUPS     32(DI), Y9     \
	LD((SI), Y10)              \
	LD(8*eb(SI), Y11)          \
	LD((R8), Y12)              \
	LD(8*eb(R8), Y13)          \
	VFMADD231PS Y8, Y10, Y0    \
	VFMADD231PS Y9, Y11, Y4    \
	VFMADD231PS Y8, Y12, Y1    \
	VFMADD231PS Y9, Y13, Y5    \
	LD((R9), Y10)              \
	LD(8*eb(R9), Y11)          \
	LD((R10), Y12)             \
	LD(8*eb(R10), Y13)         \
	VFMADD231PS Y8, Y10, Y2    \
	VFMADD231PS Y9, Y11, Y6    \
	VFMADD231PS Y8, Y12, Y3    \
	VFMADD231PS Y9, Y13, Y7    \
	ADVW(16*eb)                \
	ADDQ        $64, DI        \
	SUBQ        $16, CX        \
	JMP         loop16         \
loop8:                             \
	CMPQ        CX, $8         \
	JL          done           \
	VMOVUPS     (DI), Y8       \
	LD((SI), Y10)              \
	LD((R8), Y11)              \
	LD((R9), Y12)              \
	LD((R10), Y13)             \
	VFMADD231PS Y8, Y10, Y0    \
	VFMADD231PS Y8, Y11, Y1    \
	VFMADD231PS Y8, Y12, Y2    \
	VFMADD231PS Y8, Y13, Y3    \
	ADVW(8*eb)                 \
	ADDQ        $32, DI        \
	SUBQ        $8, CX         \
	JMP         loop8          \
done:                              \
	FOLD8                      \
	HSUM4(DX)                  \
	VZEROUPPER                 \
	RET

// func rows4F32AVX(w *byte, rb int, x *float32, n int, out *[4]float32)
TEXT ·rows4F32AVX(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ rb+8(FP), AX
	MOVQ x+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	ROWS4(LDF32, 4)

// func rows4F16AVX(w *byte, rb int, x *float32, n int, out *[4]float32)
TEXT ·rows4F16AVX(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ rb+8(FP), AX
	MOVQ x+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	ROWS4(LDF16, 2)

// func rows4BF16AVX(w *byte, rb int, x *float32, n int, out *[4]float32)
TEXT ·rows4BF16AVX(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ rb+8(FP), AX
	MOVQ x+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	ROWS4(LDBF16, 2)

// func axpy4AVX(y, x *float32, xs int, a *[4]float32, n int)
// y[i] += a[0]·x[i] + a[1]·x[xs+i] + a[2]·x[2xs+i] + a[3]·x[3xs+i] (xs in
// floats) for n a multiple of 8: four value rows of attention per pass over y.
TEXT ·axpy4AVX(SB), NOSPLIT, $0-40
	MOVQ         y+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         xs+16(FP), AX
	MOVQ         a+24(FP), DX
	MOVQ         n+32(FP), CX
	SHLQ         $2, AX
	ROWPTRS
	VBROADCASTSS (DX), Y12
	VBROADCASTSS 4(DX), Y13
	VBROADCASTSS 8(DX), Y14
	VBROADCASTSS 12(DX), Y15

ax4loop:
	CMPQ        CX, $8
	JL          ax4done
	VMOVUPS     (DI), Y0
	VFMADD231PS (SI), Y12, Y0
	VFMADD231PS (R8), Y13, Y0
	VFMADD231PS (R9), Y14, Y0
	VFMADD231PS (R10), Y15, Y0
	VMOVUPS     Y0, (DI)
	ADDQ        $32, DI
	ADVW(32)
	SUBQ        $8, CX
	JMP         ax4loop

ax4done:
	VZEROUPPER
	RET

// func f32ToF16AVX(dst *byte, src *float32, n int)
// IEEE binary16 with round-to-nearest-even (VCVTPS2PH mode 0), as F32ToF16;
// n is a multiple of 8.
TEXT ·f32ToF16AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

h16loop:
	CMPQ      CX, $8
	JL        h16done
	VMOVUPS   (SI), Y0
	VCVTPS2PH $0, Y0, X1
	VMOVDQU   X1, (DI)
	ADDQ      $32, SI
	ADDQ      $16, DI
	SUBQ      $8, CX
	JMP       h16loop

h16done:
	VZEROUPPER
	RET
