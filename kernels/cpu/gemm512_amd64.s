//go:build amd64

#include "textflag.h"

// AVX-512 microkernel for the packed GEMM (gemm.go): a 12×16 tile, one zmm
// per x row, the x values folded into the FMAs as embedded broadcasts.

// K512 does one k: one load of the 16-float panel row at boff(SI) into zr,
// then twelve broadcast-FMAs of x[i][k] (rows at R8, R9, R10 + {0,1,2,3}·AX,
// byte offset xoff).
#define K512(boff, xoff, zr) \
	VMOVUPS               boff(SI), zr       \
	VFMADD231PS.BCST      xoff(R8), zr, Z0         \
	VFMADD231PS.BCST      xoff(R8)(AX*1), zr, Z1   \
	VFMADD231PS.BCST      xoff(R8)(AX*2), zr, Z2   \
	VFMADD231PS.BCST      xoff(R8)(DX*1), zr, Z3   \
	VFMADD231PS.BCST      xoff(R9), zr, Z4         \
	VFMADD231PS.BCST      xoff(R9)(AX*1), zr, Z5   \
	VFMADD231PS.BCST      xoff(R9)(AX*2), zr, Z6   \
	VFMADD231PS.BCST      xoff(R9)(DX*1), zr, Z7   \
	VFMADD231PS.BCST      xoff(R10), zr, Z8        \
	VFMADD231PS.BCST      xoff(R10)(AX*1), zr, Z9  \
	VFMADD231PS.BCST      xoff(R10)(AX*2), zr, Z10 \
	VFMADD231PS.BCST      xoff(R10)(DX*1), zr, Z11

#define ST512(z) \
	VMOVUPS z, (DI) \
	ADDQ    BX, DI

#define ADD512(z) \
	VADDPS  (DI), z, z \
	VMOVUPS z, (DI)    \
	ADDQ    BX, DI

// func gemm12x16AVX512(x *float32, xs int, b *float32, kc int, c *float32, ldc int, acc int)
// c[i*ldc+j] (+)= Σ_{k<kc} x[i*xs+k]·b[k*16+j] for i < 12, j < 16; kc >= 1.
// acc != 0 adds to c, otherwise c is overwritten.
TEXT ·gemm12x16AVX512(SB), NOSPLIT, $0-56
	MOVQ    x+0(FP), R8
	MOVQ    xs+8(FP), AX
	SHLQ    $2, AX
	LEAQ    (AX)(AX*2), DX
	LEAQ    (R8)(AX*4), R9
	LEAQ    (R9)(AX*4), R10
	MOVQ    b+16(FP), SI
	MOVQ    kc+24(FP), CX
	VPXORD  Z0, Z0, Z0
	VPXORD  Z1, Z1, Z1
	VPXORD  Z2, Z2, Z2
	VPXORD  Z3, Z3, Z3
	VPXORD  Z4, Z4, Z4
	VPXORD  Z5, Z5, Z5
	VPXORD  Z6, Z6, Z6
	VPXORD  Z7, Z7, Z7
	VPXORD  Z8, Z8, Z8
	VPXORD  Z9, Z9, Z9
	VPXORD  Z10, Z10, Z10
	VPXORD  Z11, Z11, Z11

loop4:
	CMPQ CX, $4
	JL   loop1
	K512(0, 0, Z24)
	K512(64, 4, Z25)
	K512(128, 8, Z26)
	K512(192, 12, Z27)
	ADDQ $256, SI
	ADDQ $16, R8
	ADDQ $16, R9
	ADDQ $16, R10
	SUBQ $4, CX
	JMP  loop4

loop1:
	TESTQ CX, CX
	JZ    store
	K512(0, 0, Z24)
	ADDQ  $64, SI
	ADDQ  $4, R8
	ADDQ  $4, R9
	ADDQ  $4, R10
	DECQ  CX
	JMP   loop1

store:
	MOVQ  c+32(FP), DI
	MOVQ  ldc+40(FP), BX
	SHLQ  $2, BX
	MOVQ  acc+48(FP), AX
	TESTQ AX, AX
	JNZ   add
	ST512(Z0)
	ST512(Z1)
	ST512(Z2)
	ST512(Z3)
	ST512(Z4)
	ST512(Z5)
	ST512(Z6)
	ST512(Z7)
	ST512(Z8)
	ST512(Z9)
	ST512(Z10)
	ST512(Z11)
	VZEROUPPER
	RET

add:
	ADD512(Z0)
	ADD512(Z1)
	ADD512(Z2)
	ADD512(Z3)
	ADD512(Z4)
	ADD512(Z5)
	ADD512(Z6)
	ADD512(Z7)
	ADD512(Z8)
	ADD512(Z9)
	ADD512(Z10)
	ADD512(Z11)
	VZEROUPPER
	RET

// K16 does one k of the 16×16 tile: K512's twelve rows, then rows 12–15 at
// R11 + {0,1,2,3}·AX.
#define K16(boff, xoff, zr) \
	K512(boff, xoff, zr)                             \
	VFMADD231PS.BCST      xoff(R11), zr, Z12         \
	VFMADD231PS.BCST      xoff(R11)(AX*1), zr, Z13   \
	VFMADD231PS.BCST      xoff(R11)(AX*2), zr, Z14   \
	VFMADD231PS.BCST      xoff(R11)(DX*1), zr, Z15

// func gemm16x16AVX512(x *float32, xs int, b *float32, kc int, c *float32, ldc int, acc int)
// gemm12x16AVX512 for 16 x rows: a batch of sixteen (batch-16 decode) is one
// tile with no padded rows, and each panel load feeds sixteen FMAs.
TEXT ·gemm16x16AVX512(SB), NOSPLIT, $0-56
	MOVQ    x+0(FP), R8
	MOVQ    xs+8(FP), AX
	SHLQ    $2, AX
	LEAQ    (AX)(AX*2), DX
	LEAQ    (R8)(AX*4), R9
	LEAQ    (R9)(AX*4), R10
	LEAQ    (R10)(AX*4), R11
	MOVQ    b+16(FP), SI
	MOVQ    kc+24(FP), CX
	VPXORD  Z0, Z0, Z0
	VPXORD  Z1, Z1, Z1
	VPXORD  Z2, Z2, Z2
	VPXORD  Z3, Z3, Z3
	VPXORD  Z4, Z4, Z4
	VPXORD  Z5, Z5, Z5
	VPXORD  Z6, Z6, Z6
	VPXORD  Z7, Z7, Z7
	VPXORD  Z8, Z8, Z8
	VPXORD  Z9, Z9, Z9
	VPXORD  Z10, Z10, Z10
	VPXORD  Z11, Z11, Z11
	VPXORD  Z12, Z12, Z12
	VPXORD  Z13, Z13, Z13
	VPXORD  Z14, Z14, Z14
	VPXORD  Z15, Z15, Z15

loop4:
	CMPQ CX, $4
	JL   loop1
	K16(0, 0, Z24)
	K16(64, 4, Z25)
	K16(128, 8, Z26)
	K16(192, 12, Z27)
	ADDQ $256, SI
	ADDQ $16, R8
	ADDQ $16, R9
	ADDQ $16, R10
	ADDQ $16, R11
	SUBQ $4, CX
	JMP  loop4

loop1:
	TESTQ CX, CX
	JZ    store
	K16(0, 0, Z24)
	ADDQ  $64, SI
	ADDQ  $4, R8
	ADDQ  $4, R9
	ADDQ  $4, R10
	ADDQ  $4, R11
	DECQ  CX
	JMP   loop1

store:
	MOVQ  c+32(FP), DI
	MOVQ  ldc+40(FP), BX
	SHLQ  $2, BX
	MOVQ  acc+48(FP), AX
	TESTQ AX, AX
	JNZ   add
	ST512(Z0)
	ST512(Z1)
	ST512(Z2)
	ST512(Z3)
	ST512(Z4)
	ST512(Z5)
	ST512(Z6)
	ST512(Z7)
	ST512(Z8)
	ST512(Z9)
	ST512(Z10)
	ST512(Z11)
	ST512(Z12)
	ST512(Z13)
	ST512(Z14)
	ST512(Z15)
	VZEROUPPER
	RET

add:
	ADD512(Z0)
	ADD512(Z1)
	ADD512(Z2)
	ADD512(Z3)
	ADD512(Z4)
	ADD512(Z5)
	ADD512(Z6)
	ADD512(Z7)
	ADD512(Z8)
	ADD512(Z9)
	ADD512(Z10)
	ADD512(Z11)
	ADD512(Z12)
	ADD512(Z13)
	ADD512(Z14)
	ADD512(Z15)
	VZEROUPPER
	RET
