//go:build amd64

#include "textflag.h"
#include "rows_amd64.h"

// rows4F32AVX512 is rows4F32AVX (simd_amd64.s) with zmm registers: the
// decode matvec's inner loop for f32 weights. A step takes 32 columns of
// each of the four rows (two cache lines a row, x in Z8/Z9, sums in Z0–Z3
// and Z4–Z7) and prefetches the same two lines of the next four rows (R11 =
// 4·rb ahead), as the AVX2 kernel does one line at a time; then one 16-column
// step, the sums folded to ymm, one 8-column step and the four sums to (DX).

#define PF2(r) \
	PREFETCHT0 (r)(R11*1)   \
	PREFETCHT0 64(r)(R11*1)

#define FOLDZ(z, y, t) \
	VEXTRACTF64X4 $1, z, t \
	VADDPS        t, y, y

// func rows4F32AVX512(w *byte, rb int, x *float32, n int, out *[4]float32)
TEXT ·rows4F32AVX512(SB), NOSPLIT, $0-40
	MOVQ   w+0(FP), SI
	MOVQ   rb+8(FP), AX
	MOVQ   x+16(FP), DI
	MOVQ   n+24(FP), CX
	MOVQ   out+32(FP), DX
	ROWPTRS
	LEAQ   (AX*4), R11
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	VXORPS Z4, Z4, Z4
	VXORPS Z5, Z5, Z5
	VXORPS Z6, Z6, Z6
	VXORPS Z7, Z7, Z7

loop32:
	CMPQ        CX, $32
	JL          step16
	PF2(SI)
	PF2(R8)
	PF2(R9)
	PF2(R10)
	VMOVUPS     (DI), Z8
	VMOVUPS     64(DI), Z9
	VFMADD231PS (SI), Z8, Z0
	VFMADD231PS 64(SI), Z9, Z4
	VFMADD231PS (R8), Z8, Z1
	VFMADD231PS 64(R8), Z9, Z5
	VFMADD231PS (R9), Z8, Z2
	VFMADD231PS 64(R9), Z9, Z6
	VFMADD231PS (R10), Z8, Z3
	VFMADD231PS 64(R10), Z9, Z7
	ADDQ        $128, SI
	ADDQ        $128, R8
	ADDQ        $128, R9
	ADDQ        $128, R10
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         loop32

step16:
	CMPQ        CX, $16
	JL          fold
	VMOVUPS     (DI), Z8
	VFMADD231PS (SI), Z8, Z0
	VFMADD231PS (R8), Z8, Z1
	VFMADD231PS (R9), Z8, Z2
	VFMADD231PS (R10), Z8, Z3
	ADDQ        $64, SI
	ADDQ        $64, R8
	ADDQ        $64, R9
	ADDQ        $64, R10
	ADDQ        $64, DI
	SUBQ        $16, CX

fold:
	VADDPS Z4, Z0, Z0
	VADDPS Z5, Z1, Z1
	VADDPS Z6, Z2, Z2
	VADDPS Z7, Z3, Z3
	FOLDZ(Z0, Y0, Y4)
	FOLDZ(Z1, Y1, Y5)
	FOLDZ(Z2, Y2, Y6)
	FOLDZ(Z3, Y3, Y7)
	CMPQ        CX, $8
	JL          done
	VMOVUPS     (DI), Y8
	VFMADD231PS (SI), Y8, Y0
	VFMADD231PS (R8), Y8, Y1
	VFMADD231PS (R9), Y8, Y2
	VFMADD231PS (R10), Y8, Y3

done:
	HSUM4(DX)
	VZEROUPPER
	RET
