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
