// RMSNorm: one block per row; out = x / sqrt(mean(x²) + eps) * weight.
// out may alias x (each thread reads its elements before writing them).
#include "common.cuh"

extern "C" __global__ void rmsnorm_f32(float* out, const float* x, const float* w, int dim, float eps) {
    __shared__ float red[32];
    const float* xr = x + (size_t)blockIdx.x * dim;
    float* orow = out + (size_t)blockIdx.x * dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    float s = (float)(1.0 / sqrt((double)ss / dim + (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x) orow[i] = xr[i] * s * w[i];
}
