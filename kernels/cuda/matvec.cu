// matvec: out[m, N] = x[m, K] · wᵀ for a row-major weight w [N, K] in f32,
// f16 or bf16 (quantized weights go to matvec_q), with f32 activations and
// f32 accumulation. One warp per output feature n; each warp reads its
// weight row once per group of MV_ROWS input rows (grid.y walks the groups),
// so for decode (m ≤ 8) every weight byte is read once. It is the small-M
// path and the fallback when cuBLAS is absent.
#include "quant.cuh"

#define MV_ROWS 8

extern "C" __global__ void matvec(float* out, const float* x, const unsigned char* w,
                                  int m, int N, int K, long row_bytes, int dtype) {
    int n = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (n >= N) return;
    int m0 = blockIdx.y * MV_ROWS;
    int mr = min(MV_ROWS, m - m0);
    const unsigned char* wr = w + (size_t)n * row_bytes;
    const float* xb = x + (size_t)m0 * K;
    float acc[MV_ROWS];
#pragma unroll
    for (int r = 0; r < MV_ROWS; r++) acc[r] = 0.f;
    for (int k = lane; k < K; k += 32) {
        float wv = load_elem(wr, k, dtype);
#pragma unroll
        for (int r = 0; r < MV_ROWS; r++)
            if (r < mr) acc[r] += wv * xb[(size_t)r * K + k];
    }
#pragma unroll
    for (int r = 0; r < MV_ROWS; r++) {
        float s = warp_sum(acc[r]);
        if (lane == 0 && r < mr) out[(size_t)(m0 + r) * N + n] = s;
    }
}
