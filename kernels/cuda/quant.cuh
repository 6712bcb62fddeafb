// Element-wise decoding of every weight dtype: the plain ones and GGML's
// block-quantized formats (layouts of ggml-common.h, as kernels/cpu/dequant.go
// decodes them; gpu-check compares both, bit for bit for the embedding).
// Each element is located from its index alone, so a warp's lanes can
// decode neighbouring elements of one block independently. Products and
// sums that the CPU decoder rounds one by one use the _rn intrinsics, so
// nvcc does not contract them into a differently rounded FMA.
#pragma once
#include "common.cuh"

__device__ __forceinline__ unsigned int u32_at(const unsigned char* p) {
    return (unsigned int)p[0] | (unsigned int)p[1] << 8 | (unsigned int)p[2] << 16 | (unsigned int)p[3] << 24;
}

// block_shape returns the values per block and the bytes per block of a
// quantized dtype (1 and the element size for plain ones).
__device__ __forceinline__ void block_shape(int dt, int* vals, int* bytes) {
    switch (dt) {
    case DT_F32: *vals = 1; *bytes = 4; return;
    case DT_F16: case DT_BF16: *vals = 1; *bytes = 2; return;
    case DT_Q8_0: *vals = 32; *bytes = 34; return;
    case DT_Q4_0: *vals = 32; *bytes = 18; return;
    case DT_Q4_1: *vals = 32; *bytes = 20; return;
    case DT_Q5_0: *vals = 32; *bytes = 22; return;
    case DT_Q5_1: *vals = 32; *bytes = 24; return;
    case DT_IQ4_NL: *vals = 32; *bytes = 18; return;
    case DT_Q2_K: *vals = 256; *bytes = 84; return;
    case DT_Q3_K: *vals = 256; *bytes = 110; return;
    case DT_Q4_K: *vals = 256; *bytes = 144; return;
    case DT_Q5_K: *vals = 256; *bytes = 176; return;
    case DT_Q6_K: *vals = 256; *bytes = 210; return;
    case DT_MXFP4: *vals = 32; *bytes = 17; return;
    default: *vals = 256; *bytes = 136; return; // DT_IQ4_XS
    }
}

__device__ __forceinline__ int iq4nl_value(int q) {
    const signed char kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    return kv[q];
}

// mxfp4_value is value i of a GGML MXFP4 block (kernels/cpu/mxfp4.go): an
// E2M1 code (sign, two exponent bits, one mantissa bit: ±{0, 0.5, 1, 1.5,
// 2, 3, 4, 6}) times the E8M0 scale byte's 2^(e−127) (e = 0: the subnormal
// 2^-127; 255: NaN). Every product is exact (or overflows, as on the CPU).
__device__ __forceinline__ float mxfp4_value(const unsigned char* b, int i) {
    const float e2m1[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
    int q = i < 16 ? b[1 + i] & 15 : b[1 + i - 16] >> 4;
    unsigned int e = b[0];
    float s = __uint_as_float(e == 255 ? 0x7fc00000u : e == 0 ? 0x00400000u : e << 23);
    float v = __fmul_rn(e2m1[q & 7], s);
    return q & 8 ? -v : v;
}

// nib32 is value i of a 32-value block's 16 nibble bytes: low nibbles are
// values 0–15, high nibbles 16–31.
__device__ __forceinline__ int nib32(const unsigned char* qs, int i) {
    return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
}

// dequant_block_elem decodes value i of the block at b.
__device__ __forceinline__ float dequant_block_elem(const unsigned char* b, int i, int dt) {
    switch (dt) {
    case DT_Q8_0:
        return f16_at(b) * (float)((const signed char*)b)[2 + i];
    case DT_Q4_0:
        return f16_at(b) * (float)(nib32(b + 2, i) - 8);
    case DT_Q4_1:
        return __fadd_rn(__fmul_rn((float)nib32(b + 4, i), f16_at(b)), f16_at(b + 2));
    case DT_Q5_0:
        return f16_at(b) * (float)(nib32(b + 6, i) + 16 * ((u32_at(b + 2) >> i) & 1) - 16);
    case DT_Q5_1:
        return __fadd_rn(__fmul_rn((float)(nib32(b + 8, i) + 16 * ((u32_at(b + 4) >> i) & 1)), f16_at(b)), f16_at(b + 2));
    case DT_IQ4_NL:
        return f16_at(b) * (float)iq4nl_value(nib32(b + 2, i));
    case DT_Q2_K: { // value 128n + 32j + l: bits 2j of byte 32n + l; a (scale, min) nibble pair per 16
        int n = i / 128, j = i % 128 / 32, l = i % 32;
        int q = (b[16 + 32 * n + l] >> (2 * j)) & 3;
        int s = b[i / 16];
        return __fsub_rn(__fmul_rn(__fmul_rn(f16_at(b + 80), (float)(s & 15)), (float)q), __fmul_rn(f16_at(b + 82), (float)(s >> 4)));
    }
    case DT_Q3_K: { // Q2_K's low bits, a mask bit that cancels the −4, sixteen 6-bit scales (+32)
        int n = i / 128, j = i % 128 / 32, l = i % 32;
        int q = (b[32 + 32 * n + l] >> (2 * j)) & 3;
        if (!((b[l] >> (4 * n + j)) & 1)) q -= 4;
        int g = i / 16;
        int sc = (((b[96 + g % 8] >> (4 * (g / 8))) & 15) | ((b[104 + g % 4] >> (2 * (g / 4))) & 3) << 4) - 32;
        return f16_at(b + 108) * (float)sc * (float)q;
    }
    case DT_Q4_K:
    case DT_Q5_K: { // eight (scale, min) 6-bit pairs; 64 values read 32 nibble bytes
        int sub = i / 32;
        const unsigned char* s = b + 4;
        int sc = sub < 4 ? s[sub] & 63 : (s[sub + 4] & 15) | (s[sub - 4] >> 6) << 4;
        int mn = sub < 4 ? s[sub + 4] & 63 : (s[sub + 4] >> 4) | (s[sub] >> 6) << 4;
        const unsigned char* qs = b + (dt == DT_Q5_K ? 48 : 16);
        int q = (qs[32 * (sub / 2) + i % 32] >> (4 * (sub % 2))) & 15;
        if (dt == DT_Q5_K) q += 16 * ((b[16 + i % 32] >> sub) & 1);
        return __fsub_rn(__fmul_rn(__fmul_rn(f16_at(b), (float)sc), (float)q), __fmul_rn(f16_at(b + 2), (float)mn));
    }
    case DT_Q6_K: { // low nibbles, high bit pairs, int8 scale per 16
        int half = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
        int lo = (b[64 * half + l + 32 * (quarter % 2)] >> (4 * (quarter / 2))) & 15;
        int hi = (b[128 + 32 * half + l] >> (2 * quarter)) & 3;
        int sc = ((const signed char*)b)[192 + 8 * half + l / 16 + 2 * quarter];
        return f16_at(b + 208) * (float)sc * (float)((lo | hi << 4) - 32);
    }
    case DT_MXFP4:
        return mxfp4_value(b, i);
    default: { // DT_IQ4_XS: sub-block scales (6 bits, +32), IQ4_NL codes
        int ib = i / 32;
        int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((b[2] | b[3] << 8) >> (2 * ib)) & 3) << 4;
        return f16_at(b) * (float)(ls - 32) * (float)iq4nl_value(nib32(b + 8 + 16 * ib, i % 32));
    }
    }
}

// load_elem reads element k of a weight row stored in dtype dt.
__device__ __forceinline__ float load_elem(const unsigned char* row, int k, int dt) {
    switch (dt) {
    case DT_F32: return reinterpret_cast<const float*>(row)[k];
    case DT_F16: return f16_at(row + 2 * (size_t)k);
    case DT_BF16: return bf16_at(row + 2 * (size_t)k);
    default: {
        int vals, bytes;
        block_shape(dt, &vals, &bytes);
        return dequant_block_elem(row + (size_t)(k / vals) * bytes, k % vals, dt);
    }
    }
}
