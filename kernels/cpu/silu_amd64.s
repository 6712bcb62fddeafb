//go:build amd64

#include "textflag.h"

// Vectorised SiLU·up: the same Cephes exp polynomial as expf (ops.go), eight
// lanes at a time with AVX2/FMA. Go assembler operand order: sources first,
// destination last.

// VEC8 defines a 32-byte constant holding eight copies of a float32's bits.
#define VEC8(name, bits) \
	DATA name+0(SB)/4, $bits  \
	DATA name+4(SB)/4, $bits  \
	DATA name+8(SB)/4, $bits  \
	DATA name+12(SB)/4, $bits \
	DATA name+16(SB)/4, $bits \
	DATA name+20(SB)/4, $bits \
	DATA name+24(SB)/4, $bits \
	DATA name+28(SB)/4, $bits \
	GLOBL name(SB), RODATA|NOPTR, $32

VEC8(expHi<>, 0x42b00000)     // 88.0: exp stays finite below
VEC8(expLo<>, 0xc2ae0000)     // -87.0: exp stays normal above
VEC8(expLog2e<>, 0x3fb8aa3b)  // 1.44269504
VEC8(expC1<>, 0x3f318000)     // 0.693359375
VEC8(expC2<>, 0xb95e8083)     // -2.12194440e-4
VEC8(expP0<>, 0x39506967)     // 1.9875691500e-4
VEC8(expP1<>, 0x3ab743ce)     // 1.3981999507e-3
VEC8(expP2<>, 0x3c088908)     // 8.3334519073e-3
VEC8(expP3<>, 0x3d2aa9c1)     // 4.1665795894e-2
VEC8(expP4<>, 0x3e2aaaaa)     // 1.6666665459e-1
VEC8(expP5<>, 0x3f000000)     // 5.0000001201e-1
VEC8(expOne<>, 0x3f800000)    // 1.0
VEC8(expBias<>, 0x0000007f)   // 127 (int32)

// EXPY1 sets Y3 = exp(Y1) for Y1 clamped to [-87, 88] (Y1, Y2, Y4 are
// clobbered): n = round(x·log2e), r = x - n·ln2 (in two parts), a degree-5
// polynomial for exp(r), then the exponent n added to its bits.
#define EXPY1 \
	VMINPS       expHi<>(SB), Y1, Y1          \
	VMAXPS       expLo<>(SB), Y1, Y1          \
	VMULPS       expLog2e<>(SB), Y1, Y2       \
	VROUNDPS     $0, Y2, Y2                   \
	VFNMADD231PS expC1<>(SB), Y2, Y1          \
	VFNMADD231PS expC2<>(SB), Y2, Y1          \
	VMOVUPS      expP0<>(SB), Y3              \
	VFMADD213PS  expP1<>(SB), Y1, Y3          \
	VFMADD213PS  expP2<>(SB), Y1, Y3          \
	VFMADD213PS  expP3<>(SB), Y1, Y3          \
	VFMADD213PS  expP4<>(SB), Y1, Y3          \
	VFMADD213PS  expP5<>(SB), Y1, Y3          \
	VMULPS       Y1, Y1, Y4                   \
	VFMADD213PS  Y1, Y4, Y3                   \
	VADDPS       expOne<>(SB), Y3, Y3         \
	VCVTPS2DQ    Y2, Y2                       \
	VPADDD       expBias<>(SB), Y2, Y2        \
	VPSLLD       $23, Y2, Y2                  \
	VMULPS       Y2, Y3, Y3

// func siluMulAVX(out, gate, up *float32, n int)
// n is a multiple of 8. out[i] = gate[i]·up[i] / (1 + exp(-gate[i])); a lane
// whose exp would overflow (gate < -88) gives 0, as expf's +Inf does.
TEXT ·siluMulAVX(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DX
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DI
	MOVQ n+24(FP), CX

loop:
	CMPQ         CX, $8
	JL           done
	VMOVUPS      (SI), Y0
	VXORPS       Y1, Y1, Y1
	VSUBPS       Y0, Y1, Y1                  // x = -g
	VCMPPS       $0x1e, expHi<>(SB), Y1, Y5  // overflow lanes: x > 88
	EXPY1
	VADDPS       expOne<>(SB), Y3, Y3        // 1 + exp(-g)
	VMULPS       (DI), Y0, Y0                // g·up
	VDIVPS       Y3, Y0, Y0
	VANDNPS      Y0, Y5, Y0                  // overflow lanes → 0
	VMOVUPS      Y0, (DX)
	ADDQ         $32, SI
	ADDQ         $32, DI
	ADDQ         $32, DX
	SUBQ         $8, CX
	JMP          loop

done:
	VZEROUPPER
	RET

// func expSubSumAVX(x *float32, mx float32, n int) float64
// n is a multiple of 8. x[i] = exp(x[i] - mx) in place; returns their sum,
// accumulated in float64 (a float32 sum over a 32k vocabulary drifts by
// parts in a million).
// Softmax and attention pass mx = max(x), so x - mx <= 0; below -87
// (including -Inf, a masked logit) the value is exactly 0 (exp there is
// under 1.7e-38, immaterial next to the max's 1).
TEXT ·expSubSumAVX(SB), NOSPLIT, $0-32
	MOVQ         x+0(FP), SI
	VBROADCASTSS mx+8(FP), Y5
	MOVQ         n+16(FP), CX
	VXORPD       Y6, Y6, Y6
	VXORPD       Y10, Y10, Y10

esloop:
	CMPQ    CX, $8
	JL      esdone
	VMOVUPS (SI), Y1
	VSUBPS  Y5, Y1, Y1
	VCMPPS  $0x11, expLo<>(SB), Y1, Y7 // lanes below -87
	EXPY1
	VANDNPS Y3, Y7, Y3
	VMOVUPS Y3, (SI)
	VCVTPS2PD    X3, Y8
	VEXTRACTF128 $1, Y3, X9
	VCVTPS2PD    X9, Y9
	VADDPD       Y8, Y6, Y6
	VADDPD       Y9, Y10, Y10
	ADDQ    $32, SI
	SUBQ    $8, CX
	JMP     esloop

esdone:
	VADDPD       Y10, Y6, Y6
	VEXTRACTF128 $1, Y6, X1
	VADDPD       X1, X6, X6
	VHADDPD      X6, X6, X6
	VZEROUPPER
	MOVSD        X6, ret+24(FP)
	RET

// Constants of the activations below (act.go).
VEC8(geluC1<>, 0x3fcc422a)    // 1.5957691 = 2·√(2/π)
VEC8(geluC2<>, 0x3d922279)    // 0.071354816 = 2·√(2/π)·0.044715
VEC8(actTwo<>, 0x40000000)    // 2.0

// func gegluTanhAVX(out, gate, up *float32, n int)
// n is a multiple of 8. out[i] = g·up/(1 + exp(-g·(c1 + c2·g²))), g = gate[i]:
// gelu's tanh form as x·σ(2u). Overflow lanes (-z > 88) give 0.
TEXT ·gegluTanhAVX(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DX
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DI
	MOVQ n+24(FP), CX

ggloop:
	CMPQ         CX, $8
	JL           ggdone
	VMOVUPS      (SI), Y0                    // g
	VMULPS       Y0, Y0, Y1                  // g²
	VMOVUPS      geluC2<>(SB), Y2
	VFMADD213PS  geluC1<>(SB), Y1, Y2        // c1 + c2·g²
	VMULPS       Y0, Y2, Y2                  // z
	VXORPS       Y1, Y1, Y1
	VSUBPS       Y2, Y1, Y1                  // x = -z
	VCMPPS       $0x1e, expHi<>(SB), Y1, Y5  // overflow lanes: x > 88
	EXPY1
	VADDPS       expOne<>(SB), Y3, Y3        // 1 + exp(-z)
	VMULPS       (DI), Y0, Y0                // g·up
	VDIVPS       Y3, Y0, Y0
	VANDNPS      Y0, Y5, Y0                  // overflow lanes → 0
	VMOVUPS      Y0, (DX)
	ADDQ         $32, SI
	ADDQ         $32, DI
	ADDQ         $32, DX
	SUBQ         $8, CX
	JMP          ggloop

ggdone:
	VZEROUPPER
	RET

// func swigluOAIAVX(out, gate, up *float32, alpha, limit float32, n int)
// n is a multiple of 8. g = min(gate, limit), u = clamp(up, -limit, limit)
// (a NaN input stays NaN: the min/max keep their second Intel operand);
// out = g·(u+1)/(1 + exp(-alpha·g)). Overflow lanes give 0.
TEXT ·swigluOAIAVX(SB), NOSPLIT, $0-40
	MOVQ         out+0(FP), DX
	MOVQ         gate+8(FP), SI
	MOVQ         up+16(FP), DI
	VBROADCASTSS alpha+24(FP), Y6
	VBROADCASTSS limit+28(FP), Y7
	MOVQ         n+32(FP), CX
	VXORPS       Y8, Y8, Y8
	VSUBPS       Y7, Y8, Y8                  // -limit

soloop:
	CMPQ         CX, $8
	JL           sodone
	VMOVUPS      (SI), Y0
	VMINPS       Y0, Y7, Y0                  // g = min(limit, gate)
	VMOVUPS      (DI), Y9
	VMINPS       Y9, Y7, Y9                  // min(limit, up)
	VMAXPS       Y9, Y8, Y9                  // u = max(-limit, ·)
	VADDPS       expOne<>(SB), Y9, Y9        // u + 1
	VMULPS       Y6, Y0, Y2                  // alpha·g
	VXORPS       Y1, Y1, Y1
	VSUBPS       Y2, Y1, Y1                  // x = -alpha·g
	VCMPPS       $0x1e, expHi<>(SB), Y1, Y5  // overflow lanes: x > 88
	EXPY1
	VADDPS       expOne<>(SB), Y3, Y3
	VMULPS       Y9, Y0, Y0                  // g·(u+1)
	VDIVPS       Y3, Y0, Y0
	VANDNPS      Y0, Y5, Y0
	VMOVUPS      Y0, (DX)
	ADDQ         $32, SI
	ADDQ         $32, DI
	ADDQ         $32, DX
	SUBQ         $8, CX
	JMP          soloop

sodone:
	VZEROUPPER
	RET

// func softcapAVX(x *float32, k, cap float32, n int)
// n is a multiple of 8; k = -2/cap. x[i] = cap·(2/(1 + exp(k·x[i])) - 1) =
// cap·tanh(x[i]/cap); the exp's clamp saturates the result at ±cap.
TEXT ·softcapAVX(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), SI
	VBROADCASTSS k+8(FP), Y7
	VBROADCASTSS cap+12(FP), Y6
	MOVQ         n+16(FP), CX

scloop:
	CMPQ         CX, $8
	JL           scdone
	VMOVUPS      (SI), Y1
	VMULPS       Y7, Y1, Y1                  // k·x
	EXPY1
	VADDPS       expOne<>(SB), Y3, Y3        // 1 + exp(k·x)
	VMOVUPS      actTwo<>(SB), Y0
	VDIVPS       Y3, Y0, Y0                  // 2/(1 + exp)
	VSUBPS       expOne<>(SB), Y0, Y0        // − 1
	VMULPS       Y6, Y0, Y0                  // · cap
	VMOVUPS      Y0, (SI)
	ADDQ         $32, SI
	SUBQ         $8, CX
	JMP          scloop

scdone:
	VZEROUPPER
	RET
