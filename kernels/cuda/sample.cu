// Sampling pre-ops over logits rows: log-softmax and argmax. One block per row.
#include "common.cuh"

// log_softmax_f32: out = (x - max) - log(sum(exp(x - max))); out may alias x.
extern "C" __global__ void log_softmax_f32(float* out, const float* x, int cols) {
    __shared__ float red[32];
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* orow = out + (size_t)blockIdx.x * cols;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) mx = fmaxf(mx, xr[i]);
    mx = block_max(mx, red);
    float s = 0.f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) s += expf(xr[i] - mx);
    s = block_sum(s, red);
    float ls = logf(s);
    for (int i = threadIdx.x; i < cols; i += blockDim.x) orow[i] = (xr[i] - mx) - ls;
}

// better orders (value, index): a number beats NaN, a larger number wins, and
// among equals the lower index wins — the first maximum, as on the CPU.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    bool vn = v != v, bn = bv != bv;
    if (vn != bn) return bn;
    if (!vn && v != bv) return v > bv;
    return i < bi;
}

// argmax_f32: out[row] = first index of the largest value; blockDim.x ≤ 1024.
extern "C" __global__ void argmax_f32(int* out, const float* x, int cols) {
    __shared__ float sv[32];
    __shared__ int si[32];
    const float* xr = x + (size_t)blockIdx.x * cols;
    float bv = NAN;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
        if (better(xr[i], i, bv, bi)) { bv = xr[i]; bi = i; }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) { sv[warp] = bv; si[warp] = bi; }
    __syncthreads();
    if (warp == 0) {
        bv = lane < nw ? sv[lane] : NAN;
        bi = lane < nw ? si[lane] : 0x7fffffff;
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
        }
        if (lane == 0) out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
    }
}
