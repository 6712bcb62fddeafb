// Shared helpers for the kvhost CUDA kernels. Every kernel is extern "C" so
// its PTX entry name is the plain name the host looks up.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// Weight element types, numbered as host/device.DType.
#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2
#define DT_Q8_0 3
#define Q8_BLOCK 32
#define Q8_BLOCK_BYTES 34

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

// load_elem reads element k of a weight row stored in dtype dt.
__device__ __forceinline__ float load_elem(const unsigned char* row, int k, int dt) {
    switch (dt) {
    case DT_F32: return reinterpret_cast<const float*>(row)[k];
    case DT_F16: return f16_at(row + 2 * (size_t)k);
    case DT_BF16: return bf16_at(row + 2 * (size_t)k);
    default: {
        const unsigned char* b = row + (size_t)(k / Q8_BLOCK) * Q8_BLOCK_BYTES;
        return f16_at(b) * (float)(reinterpret_cast<const signed char*>(b + 2))[k % Q8_BLOCK];
    }
    }
}
