//go:build amd64

#include "textflag.h"

// AVX2 activation quantizers (qact.go): same arithmetic as the portable
// ones, so both give the same bytes. VCVTPS2DQ rounds half to even, as
// nearestInt does.

DATA absmaskq<>+0(SB)/4, $0x7fffffff
GLOBL absmaskq<>(SB), RODATA|NOPTR, $4

DATA f127q<>+0(SB)/4, $127.0
GLOBL f127q<>(SB), RODATA|NOPTR, $4

DATA fm127q<>+0(SB)/4, $-127.0
GLOBL fm127q<>(SB), RODATA|NOPTR, $4

DATA f1q<>+0(SB)/4, $1.0
GLOBL f1q<>(SB), RODATA|NOPTR, $4

// packperm puts the dwords of VPACKSSDW+VPACKSSWB's lane-interleaved
// result back in value order.
DATA packperm<>+0(SB)/4, $0
DATA packperm<>+4(SB)/4, $4
DATA packperm<>+8(SB)/4, $1
DATA packperm<>+12(SB)/4, $5
DATA packperm<>+16(SB)/4, $2
DATA packperm<>+20(SB)/4, $6
DATA packperm<>+24(SB)/4, $3
DATA packperm<>+28(SB)/4, $7
GLOBL packperm<>(SB), RODATA|NOPTR, $32

// HMAXY(y, x) leaves the maximum of y's 8 floats in every lane of x.
#define HMAXY(y, x) \
	VEXTRACTF128 $1, y, X15    \
	VMAXPS       X15, x, x     \
	VPERMILPS    $0x4e, x, X15 \
	VMAXPS       X15, x, x     \
	VPERMILPS    $0xb1, x, X15 \
	VMAXPS       X15, x, x

// QPACK32(off) scales Y0–Y3 (32 values) by Y6, rounds them to int32 in
// Y0–Y3 and stores them as 32 int8 at off(DI).
#define QPACK32(off) \
	VMULPS     Y6, Y0, Y0    \
	VMULPS     Y6, Y1, Y1    \
	VMULPS     Y6, Y2, Y2    \
	VMULPS     Y6, Y3, Y3    \
	VCVTPS2DQ  Y0, Y0        \
	VCVTPS2DQ  Y1, Y1        \
	VCVTPS2DQ  Y2, Y2        \
	VCVTPS2DQ  Y3, Y3        \
	VPACKSSDW  Y1, Y0, Y8    \
	VPACKSSDW  Y3, Y2, Y9    \
	VPACKSSWB  Y9, Y8, Y8    \
	VPERMD     Y8, Y14, Y8   \
	VMOVDQU    Y8, off(DI)

// func quantQ8AVX2(x *float32, dst *q8Block, nb int)
// Per 32 values: d = max|x|/127, id = 1/d (0 for an all-zero block),
// q = round(x·id), s = d·Σq.
TEXT ·quantQ8AVX2(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), SI
	MOVQ         dst+8(FP), DI
	MOVQ         nb+16(FP), CX
	VBROADCASTSS absmaskq<>(SB), Y13
	VMOVDQU      packperm<>(SB), Y14

q8blk:
	VMOVUPS     (SI), Y0
	VMOVUPS     32(SI), Y1
	VMOVUPS     64(SI), Y2
	VMOVUPS     96(SI), Y3
	VANDPS      Y13, Y0, Y4
	VANDPS      Y13, Y1, Y5
	VMAXPS      Y5, Y4, Y4
	VANDPS      Y13, Y2, Y5
	VMAXPS      Y5, Y4, Y4
	VANDPS      Y13, Y3, Y5
	VMAXPS      Y5, Y4, Y4
	HMAXY(Y4, X4)
	VDIVSS      f127q<>(SB), X4, X5  // d = amax/127
	VXORPS      X6, X6, X6
	VUCOMISS    X6, X5
	JEQ         q8zero
	VMOVSS      f1q<>(SB), X6
	VDIVSS      X5, X6, X6           // id = 1/d

q8zero:
	VBROADCASTSS X6, Y6
	QPACK32(8)
	VPADDD      Y1, Y0, Y0
	VPADDD      Y3, Y2, Y2
	VPADDD      Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDD      X1, X0, X0
	VPSHUFD     $0x4e, X0, X1
	VPADDD      X1, X0, X0
	VPSHUFD     $0xb1, X0, X1
	VPADDD      X1, X0, X0
	VCVTDQ2PS   X0, X0
	VMULSS      X5, X0, X0           // s = d·Σq
	VMOVSS      X5, (DI)
	VMOVSS      X0, 4(DI)
	ADDQ        $128, SI
	ADDQ        $40, DI
	DECQ        CX
	JNZ         q8blk
	VZEROUPPER
	RET

// BSUM2(off) stores the sums of Y0+Y1 and Y2+Y3 (the int32 codes of 16
// values each) as two int16 at off(DI).
#define BSUM2(off) \
	VPADDD       Y1, Y0, Y0     \
	VPADDD       Y3, Y2, Y2     \
	VPHADDD      Y2, Y0, Y0     \
	VPHADDD      Y0, Y0, Y0     \
	VEXTRACTI128 $1, Y0, X1     \
	VPADDD       X1, X0, X0     \
	VPACKSSDW    X0, X0, X0     \
	VMOVD        X0, AX         \
	MOVL         AX, off(DI)

// QK32(xoff, qoff, boff): 32 values of a K block.
#define QK32(xoff, qoff, boff) \
	VMOVUPS xoff(SI), Y0      \
	VMOVUPS xoff+32(SI), Y1   \
	VMOVUPS xoff+64(SI), Y2   \
	VMOVUPS xoff+96(SI), Y3   \
	QPACK32(qoff)             \
	BSUM2(boff)

// func quantQ8KAVX2(x *float32, dst *q8KBlock, nb int)
// Per 256 values: the one of largest magnitude, mx (max if max ≥ −min,
// else min), maps to −127: iscale = −127/mx, q = round(x·iscale), bsums
// the sums of 16, d = 1/iscale; an all-zero block is all zeros.
TEXT ·quantQ8KAVX2(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), SI
	MOVQ         dst+8(FP), DI
	MOVQ         nb+16(FP), CX
	VMOVDQU      packperm<>(SB), Y14

kblk:
	VMOVUPS (SI), Y4
	VMOVUPS Y4, Y5
	LEAQ    32(SI), R8
	MOVQ    $31, DX

kmax:
	VMOVUPS (R8), Y0
	VMAXPS  Y0, Y4, Y4
	VMINPS  Y0, Y5, Y5
	ADDQ    $32, R8
	DECQ    DX
	JNZ     kmax
	HMAXY(Y4, X4)                   // max
	VXORPS  X7, X7, X7
	VSUBPS  Y5, Y7, Y5              // −x: max of −x is −min
	HMAXY(Y5, X5)                   // −min
	VMAXSS  X5, X4, X6              // amax
	VXORPS  X7, X7, X7
	VUCOMISS X7, X6
	JEQ     kzero
	VMOVAPS X4, X6                  // mx = max
	VUCOMISS X5, X4
	JAE     kpos                    // max ≥ −min
	VSUBSS  X5, X7, X6              // mx = min

kpos:
	VMOVSS       fm127q<>(SB), X7
	VDIVSS       X6, X7, X7          // iscale = −127/mx
	VBROADCASTSS X7, Y6
	QK32(0, 36, 4)
	QK32(128, 68, 8)
	QK32(256, 100, 12)
	QK32(384, 132, 16)
	QK32(512, 164, 20)
	QK32(640, 196, 24)
	QK32(768, 228, 28)
	QK32(896, 260, 32)
	VMOVSS       f1q<>(SB), X6
	VDIVSS       X7, X6, X6          // d = 1/iscale
	VMOVSS       X6, (DI)
	JMP          knext

kzero:
	VXORPS  Y0, Y0, Y0
	MOVL    $0, (DI)
	MOVQ    $0, DX

kzloop:
	VMOVDQU Y0, 4(DI)(DX*1)
	ADDQ    $32, DX
	CMPQ    DX, $288
	JL      kzloop

knext:
	ADDQ    $1024, SI
	ADDQ    $292, DI
	DECQ    CX
	JNZ     kblk
	VZEROUPPER
	RET
