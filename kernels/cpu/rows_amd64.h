// Macros shared by the amd64 kernels that read weight or cache rows in
// place (simd_amd64.s, rows4_512_amd64.s, attn_amd64.s, attnrun512_amd64.s,
// gemm16_amd64.s): one definition of each.

// The element loaders: the values at mem widened to float32 in reg (8 for a
// ymm, 16 for a zmm). A bf16 is a float32's high half.
#define LDF32(mem, reg) VMOVUPS mem, reg
#define LDF16(mem, reg) VCVTPH2PS mem, reg
#define LDBF16(mem, reg) \
	VPMOVZXWD mem, reg \
	VPSLLD    $16, reg, reg

// ROWPTRS sets SI, R8, R9, R10 to rows 0..3 (SI = the first, stride AX).
#define ROWPTRS \
	LEAQ (SI)(AX*1), R8  \
	LEAQ (R8)(AX*1), R9  \
	LEAQ (R9)(AX*1), R10

// HSUM4 reduces Y0..Y3 to four floats stored at (dst).
#define HSUM4(dst) \
	VHADDPS      Y1, Y0, Y8  \
	VHADDPS      Y3, Y2, Y9  \
	VHADDPS      Y9, Y8, Y8  \
	VEXTRACTF128 $1, Y8, X9  \
	VADDPS       X9, X8, X8  \
	VMOVUPS      X8, (dst)
