// Elementwise kernels: residual add, bias add, SiLU×mul and the f32 → f16/bf16
// conversions that feed cuBLAS. Grid-stride loops: any grid covers any n.
#include "common.cuh"

extern "C" __global__ void add_f32(float* out, const float* a, const float* b, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

// add_bias_f32: out[r*n + c] += bias[c] for r < m.
extern "C" __global__ void add_bias_f32(float* out, const float* bias, long m, int n) {
    long total = m * n;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x)
        out[i] += bias[i % n];
}

// silu_mul_f32: out = gate * sigmoid(gate) * up; out may alias gate or up.
extern "C" __global__ void silu_mul_f32(float* out, const float* gate, const float* up, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float g = gate[i];
        out[i] = g / (1.f + expf(-g)) * up[i];
    }
}

extern "C" __global__ void f32_to_f16(__half* out, const float* in, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        out[i] = __float2half_rn(in[i]);
}

extern "C" __global__ void f32_to_bf16(__nv_bfloat16* out, const float* in, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16_rn(in[i]);
}
