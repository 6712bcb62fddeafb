//go:build amd64

#include "textflag.h"
#include "rows_amd64.h"

// AVX-512 kernels for decode attention read in place (attn_tile.go
// scoresVec, valuesVec): a page run of sixteen key rows scored in one call,
// and a run of value rows summed into a 64-column strip of the output held
// in registers. The AVX2 kernels (rows4, axpy4Rows) serve the rest.

// DOT(LD, mem, tmp, acc) adds the row chunk at mem times q's chunk (Z16) to acc.
#define DOT(LD, mem, tmp, acc) \
	LD(mem, tmp)               \
	VFMADD231PS tmp, Z16, acc

// PAIR(op, i1, i2, a, b, dst) sets dst to the sum of shuffles i1 and i2 of
// a (first source) and b (second), in Z16 and Z17: one level of the
// transposed reduction.
#define PAIR(op, i1, i2, a, b, dst) \
	op     $i1, b, a, Z16         \
	op     $i2, b, a, Z17         \
	VADDPS Z17, Z16, dst

// DOTS16(LD, cb) is the body of a dots16 kernel for cb bytes per 16
// elements, once SI = w, AX = rb, DI = q, CX = nc, DX = out. Row r sums
// into Z(4·(r%4) + r/4): the four shuffle levels below then leave row r's
// sum in lane r, so the sums are stored without a permutation.
#define DOTS16(LD, cb) \
	LEAQ   (AX)(AX*2), BX   \
	LEAQ   (SI)(AX*4), R8   \
	LEAQ   (R8)(AX*4), R9   \
	LEAQ   (R9)(AX*4), R10  \
	VXORPS Z0, Z0, Z0       \
	VXORPS Z1, Z1, Z1       \
	VXORPS Z2, Z2, Z2       \
	VXORPS Z3, Z3, Z3       \
	VXORPS Z4, Z4, Z4       \
	VXORPS Z5, Z5, Z5       \
	VXORPS Z6, Z6, Z6       \
	VXORPS Z7, Z7, Z7       \
	VXORPS Z8, Z8, Z8       \
	VXORPS Z9, Z9, Z9       \
	VXORPS Z10, Z10, Z10    \
	VXORPS Z11, Z11, Z11    \
	VXORPS Z12, Z12, Z12    \
	VXORPS Z13, Z13, Z13    \
	VXORPS Z14, Z14, Z14    \
	VXORPS Z15, Z15, Z15    \
dloop:                      \
	VMOVUPS (DI), Z16       \
	DOT(LD, (SI), Z17, Z0)        \
	DOT(LD, (SI)(AX*1), Z18, Z4)  \
	DOT(LD, (SI)(AX*2), Z19, Z8)  \
	DOT(LD, (SI)(BX*1), Z20, Z12) \
	DOT(LD, (R8), Z21, Z1)        \
	DOT(LD, (R8)(AX*1), Z22, Z5)  \
	DOT(LD, (R8)(AX*2), Z23, Z9)  \
	DOT(LD, (R8)(BX*1), Z24, Z13) \
	DOT(LD, (R9), Z17, Z2)        \
	DOT(LD, (R9)(AX*1), Z18, Z6)  \
	DOT(LD, (R9)(AX*2), Z19, Z10) \
	DOT(LD, (R9)(BX*1), Z20, Z14) \
	DOT(LD, (R10), Z21, Z3)       \
	DOT(LD, (R10)(AX*1), Z22, Z7) \
	DOT(LD, (R10)(AX*2), Z23, Z11) \
	DOT(LD, (R10)(BX*1), Z24, Z15) \
	ADDQ $cb, SI            \
	ADDQ $cb, R8            \
	ADDQ $cb, R9            \
	ADDQ $cb, R10           \
	ADDQ $64, DI            \
	DECQ CX                 \
	JNZ  dloop              \
	PAIR(VSHUFF32X4, 0x44, 0xEE, Z0, Z1, Z0)  \
	PAIR(VSHUFF32X4, 0x44, 0xEE, Z2, Z3, Z1)  \
	PAIR(VSHUFF32X4, 0x44, 0xEE, Z4, Z5, Z2)  \
	PAIR(VSHUFF32X4, 0x44, 0xEE, Z6, Z7, Z3)  \
	PAIR(VSHUFF32X4, 0x44, 0xEE, Z8, Z9, Z4)  \
	PAIR(VSHUFF32X4, 0x44, 0xEE, Z10, Z11, Z5) \
	PAIR(VSHUFF32X4, 0x44, 0xEE, Z12, Z13, Z6) \
	PAIR(VSHUFF32X4, 0x44, 0xEE, Z14, Z15, Z7) \
	PAIR(VSHUFF32X4, 0x88, 0xDD, Z0, Z1, Z0)  \
	PAIR(VSHUFF32X4, 0x88, 0xDD, Z2, Z3, Z1)  \
	PAIR(VSHUFF32X4, 0x88, 0xDD, Z4, Z5, Z2)  \
	PAIR(VSHUFF32X4, 0x88, 0xDD, Z6, Z7, Z3)  \
	PAIR(VSHUFPS, 0x44, 0xEE, Z0, Z1, Z0)     \
	PAIR(VSHUFPS, 0x44, 0xEE, Z2, Z3, Z1)     \
	PAIR(VSHUFPS, 0x88, 0xDD, Z0, Z1, Z0)     \
	VMOVUPS Z0, (DX)        \
	VZEROUPPER              \
	RET

// The kernels' arguments, in the registers DOTS16 and AXPYRUN expect.
#define DOTS_ARGS \
	MOVQ w+0(FP), SI   \
	MOVQ rb+8(FP), AX  \
	MOVQ q+16(FP), DI  \
	MOVQ nc+24(FP), CX \
	MOVQ out+32(FP), DX

#define AXPY_ARGS \
	MOVQ y+0(FP), DI   \
	MOVQ v+8(FP), SI   \
	MOVQ rb+16(FP), AX \
	MOVQ p+24(FP), DX  \
	MOVQ n+32(FP), CX

// func dots16F32AVX512(w *byte, rb int, q *float32, nc int, out *[16]float32)
// out[r] = Σ_{k<16·nc} row_r[k]·q[k] for the sixteen rows row_r = w + r·rb
// (bytes) of float32; nc >= 1.
TEXT ·dots16F32AVX512(SB), NOSPLIT, $0-40
	DOTS_ARGS
	DOTS16(LDF32, 64)

// func dots16F16AVX512(w *byte, rb int, q *float32, nc int, out *[16]float32)
// As dots16F32AVX512 for binary16 rows.
TEXT ·dots16F16AVX512(SB), NOSPLIT, $0-40
	DOTS_ARGS
	DOTS16(LDF16, 32)

// func dots16BF16AVX512(w *byte, rb int, q *float32, nc int, out *[16]float32)
// As dots16F32AVX512 for bfloat16 rows.
TEXT ·dots16BF16AVX512(SB), NOSPLIT, $0-40
	DOTS_ARGS
	DOTS16(LDBF16, 32)

// AXPY(LD, mem, tmp, p, acc) adds p times the row's chunk at mem to acc.
#define AXPY(LD, mem, tmp, p, acc) \
	LD(mem, tmp)                   \
	VFMADD231PS tmp, p, acc

// AXPYRUN(LD, cb) is the body of an axpy64 kernel for cb bytes per 16
// elements, once DI = y, SI = v, AX = rb, DX = p, CX = n: y's 64 columns in
// Z0–Z3, even rows summed there and odd rows into Z4–Z7 (two chains of
// FMAs instead of one), added at the end.
#define AXPYRUN(LD, cb) \
	VMOVUPS (DI), Z0         \
	VMOVUPS 64(DI), Z1       \
	VMOVUPS 128(DI), Z2      \
	VMOVUPS 192(DI), Z3      \
	VXORPS  Z4, Z4, Z4       \
	VXORPS  Z5, Z5, Z5       \
	VXORPS  Z6, Z6, Z6       \
	VXORPS  Z7, Z7, Z7       \
	LEAQ    (SI)(AX*1), R8   \
	SHLQ    $1, AX           \
aloop2:                      \
	CMPQ    CX, $2           \
	JL      atail            \
	VBROADCASTSS (DX), Z8    \
	VBROADCASTSS 4(DX), Z9   \
	AXPY(LD, (SI), Z10, Z8, Z0)       \
	AXPY(LD, cb(SI), Z11, Z8, Z1)     \
	AXPY(LD, 2*cb(SI), Z12, Z8, Z2)   \
	AXPY(LD, 3*cb(SI), Z13, Z8, Z3)   \
	AXPY(LD, (R8), Z14, Z9, Z4)       \
	AXPY(LD, cb(R8), Z15, Z9, Z5)     \
	AXPY(LD, 2*cb(R8), Z16, Z9, Z6)   \
	AXPY(LD, 3*cb(R8), Z17, Z9, Z7)   \
	ADDQ    AX, SI           \
	ADDQ    AX, R8           \
	ADDQ    $8, DX           \
	SUBQ    $2, CX           \
	JMP     aloop2           \
atail:                       \
	TESTQ   CX, CX           \
	JZ      adone            \
	VBROADCASTSS (DX), Z8    \
	AXPY(LD, (SI), Z10, Z8, Z0)       \
	AXPY(LD, cb(SI), Z11, Z8, Z1)     \
	AXPY(LD, 2*cb(SI), Z12, Z8, Z2)   \
	AXPY(LD, 3*cb(SI), Z13, Z8, Z3)   \
adone:                       \
	VADDPS  Z4, Z0, Z0       \
	VADDPS  Z5, Z1, Z1       \
	VADDPS  Z6, Z2, Z2       \
	VADDPS  Z7, Z3, Z3       \
	VMOVUPS Z0, (DI)         \
	VMOVUPS Z1, 64(DI)       \
	VMOVUPS Z2, 128(DI)      \
	VMOVUPS Z3, 192(DI)      \
	VZEROUPPER               \
	RET

// func axpy64F32AVX512(y *float32, v *byte, rb int, p *float32, n int)
// y[k] += Σ_{r<n} p[r]·row_r[k] for k < 64, row_r = v + r·rb (bytes) of
// float32; n >= 0.
TEXT ·axpy64F32AVX512(SB), NOSPLIT, $0-40
	AXPY_ARGS
	AXPYRUN(LDF32, 64)

// func axpy64F16AVX512(y *float32, v *byte, rb int, p *float32, n int)
// As axpy64F32AVX512 for binary16 rows.
TEXT ·axpy64F16AVX512(SB), NOSPLIT, $0-40
	AXPY_ARGS
	AXPYRUN(LDF16, 32)

// func axpy64BF16AVX512(y *float32, v *byte, rb int, p *float32, n int)
// As axpy64F32AVX512 for bfloat16 rows.
TEXT ·axpy64BF16AVX512(SB), NOSPLIT, $0-40
	AXPY_ARGS
	AXPYRUN(LDBF16, 32)
