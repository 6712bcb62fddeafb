// Shared helpers for the kvhost CUDA kernels. Every kernel is extern "C" so
// its PTX entry name is the plain name the host looks up.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// Weight element types, numbered as host/device.DType (= kernels/cpu.DType);
// the block-quantized ones are decoded by quant.cuh.
#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2
#define DT_Q8_0 3
#define DT_Q4_0 4
#define DT_Q4_1 5
#define DT_Q5_0 6
#define DT_Q5_1 7
#define DT_Q2_K 8
#define DT_Q3_K 9
#define DT_Q4_K 10
#define DT_Q5_K 11
#define DT_Q6_K 12
#define DT_IQ4_NL 13
#define DT_IQ4_XS 14
#define DT_MXFP4 15

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// block_sum reduces v over the whole block (blockDim.x a multiple of 32, at
// most 1024); every thread gets the total. red needs 32 floats of shared
// memory and may be reused after the call returns.
__device__ __forceinline__ float block_sum(float v, float* red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : -INFINITY;
    return warp_max(v);
}

__device__ __forceinline__ float f16_at(const unsigned char* p) {
    return __half2float(*reinterpret_cast<const __half*>(p));
}

__device__ __forceinline__ float bf16_at(const unsigned char* p) {
    unsigned int bits = (unsigned int)(*reinterpret_cast<const unsigned short*>(p)) << 16;
    return __uint_as_float(bits);
}
// KV cache encodings, numbered as host/device.KVDType; byte layouts as
// kernels/cpu (kvcache.go): a head row of n elements is rowbytes(n) bytes,
// its block scales scalebytes(n) bytes in a separate span.
#define KV_F32 0
#define KV_F16 1
#define KV_BF16 2
#define KV_E4M3 3
#define KV_E5M2 4
#define KV_MXFP8 5
#define KV_NVFP4 6

__device__ __forceinline__ size_t kv_rowbytes(int n, int dt) {
    switch (dt) {
    case KV_F32: return 4 * (size_t)n;
    case KV_F16:
    case KV_BF16: return 2 * (size_t)n;
    case KV_NVFP4: return (size_t)(n + 1) / 2;
    default: return (size_t)n;
    }
}

__device__ __forceinline__ size_t kv_scalebytes(int n, int dt) {
    if (dt == KV_MXFP8) return (size_t)(n + 31) / 32;
    if (dt == KV_NVFP4) return (size_t)(n + 15) / 16;
    return 0;
}

// e4m3_value decodes OCP FP8 E4M3 exactly: sign | (c & 0x7f) << 7 is the
// binary16 of the value divided by 2^8 (subnormals included); S.1111.111
// is NaN.
__device__ __forceinline__ float e4m3_value(unsigned int c) {
    if ((c & 0x7f) == 0x7f) return __int_as_float(0x7fc00000);
    unsigned short h = (unsigned short)(((c & 0x80) << 8) | ((c & 0x7f) << 7));
    return __half2float(__ushort_as_half(h)) * 256.f;
}

// e5m2_value: an E5M2 code is the high byte of the binary16 of its value.
__device__ __forceinline__ float e5m2_value(unsigned int c) {
    return __half2float(__ushort_as_half((unsigned short)(c << 8)));
}

__device__ __forceinline__ float e2m1_value(unsigned int c) {
    const float mag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
    float v = mag[c & 7];
    return (c & 8) ? -v : v;
}

// kv_load reads element k of a head row stored in encoding dt (scales: the
// row's block scales).
__device__ __forceinline__ float kv_load(const unsigned char* row, const unsigned char* scales, int k, int dt) {
    switch (dt) {
    case KV_F32: return reinterpret_cast<const float*>(row)[k];
    case KV_F16: return f16_at(row + 2 * (size_t)k);
    case KV_BF16: return bf16_at(row + 2 * (size_t)k);
    case KV_E4M3: return e4m3_value(row[k]);
    case KV_E5M2: return e5m2_value(row[k]);
    case KV_MXFP8: {
        unsigned int s = scales[k / 32];
        if (s == 0xff) return __int_as_float(0x7fc00000);
        return ldexpf(e4m3_value(row[k]), (int)s - 127);
    }
    default: {
        unsigned int c = (row[k / 2] >> (4 * (k & 1))) & 0xf;
        return e2m1_value(c) * e4m3_value(scales[k / 16]);
    }
    }
}

// fp8_encode rounds f to a minifloat of mbits mantissa bits and the given
// bias, to nearest even, saturating at the largest finite magnitude max_mag
// (infinities too); NaN gives 0x7f. It is kernels/cpu's fp8.encode, bit for
// bit.
__device__ __forceinline__ unsigned char fp8_encode(float f, int mbits, int bias, unsigned int max_mag) {
    unsigned int b = __float_as_uint(f);
    unsigned int sign = (b >> 24) & 0x80;
    unsigned int a = b & 0x7fffffff;
    if (a > 0x7f800000) return 0x7f;
    if (a < 0x00800000) return (unsigned char)sign;
    int e = (int)(a >> 23) - 127;
    unsigned int m = (a & 0x7fffff) | (1u << 23);
    int ef = e + bias;
    int shift = 23 - mbits;
    if (ef < 1) shift += 1 - ef;
    if (shift > 25) return (unsigned char)sign;
    unsigned int q = m >> shift;
    unsigned int rem = m & ((1u << shift) - 1);
    unsigned int half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    unsigned int mag = ef < 1 ? q : ((unsigned int)ef << mbits) + (q - (1u << mbits));
    if (mag > max_mag) mag = max_mag;
    return (unsigned char)(sign | mag);
}

__device__ __forceinline__ unsigned char e4m3_encode(float f) { return fp8_encode(f, 3, 7, 0x7e); }
__device__ __forceinline__ unsigned char e5m2_encode(float f) { return fp8_encode(f, 2, 15, 0x7b); }

// bf16_bits rounds to bfloat16 as kernels/cpu's F32ToBF16: to nearest even,
// NaN kept quiet.
__device__ __forceinline__ unsigned short bf16_bits(float f) {
    unsigned int b = __float_as_uint(f);
    if ((b & 0x7fffffff) > 0x7f800000) return (unsigned short)((b >> 16) | 0x40);
    b += 0x7fff + ((b >> 16) & 1);
    return (unsigned short)(b >> 16);
}
