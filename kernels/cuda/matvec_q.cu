// matvec_q: out[m, N] = x[m, K] · wᵀ for a block-quantized row-major weight
// w [N, K] (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K–Q6_K, IQ4_NL, IQ4_XS, MXFP4), decoding
// the weights on the fly with f32 activations and f32 accumulation. One
// warp per output feature n; each lane takes 32-value groups of the row
// (group g covers values 32g..32g+31 of one block) in turn, decodes them
// once into registers and dots them with every input row of its group of
// MQ_ROWS (grid.y walks the groups), so for decode (m ≤ MQ_ROWS) every
// weight byte is read once. Any m is served; it is the only GEMM path for
// quantized weights (cuBLAS takes no quantized types).
#include "quant.cuh"

#define MQ_ROWS 8

extern "C" __global__ void matvec_q(float* out, const float* x, const unsigned char* w,
                                    int m, int N, int K, long row_bytes, int dtype) {
    int n = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (n >= N) return;
    int m0 = blockIdx.y * MQ_ROWS;
    int mr = min(MQ_ROWS, m - m0);
    const unsigned char* wr = w + (size_t)n * row_bytes;
    const float* xb = x + (size_t)m0 * K;
    int vals, bytes;
    block_shape(dtype, &vals, &bytes);
    float acc[MQ_ROWS];
#pragma unroll
    for (int r = 0; r < MQ_ROWS; r++) acc[r] = 0.f;
    for (int g = lane; g < K / 32; g += 32) {
        int k0 = 32 * g;
        const unsigned char* blk = wr + (size_t)(k0 / vals) * bytes;
        float wv[32];
#pragma unroll
        for (int j = 0; j < 32; j++) wv[j] = dequant_block_elem(blk, k0 % vals + j, dtype);
#pragma unroll
        for (int r = 0; r < MQ_ROWS; r++) {
            if (r < mr) {
                const float* xr = xb + (size_t)r * K + k0;
                float p = 0.f;
#pragma unroll
                for (int j = 0; j < 32; j++) p += wv[j] * xr[j];
                acc[r] += p;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < MQ_ROWS; r++) {
        float s = warp_sum(acc[r]);
        if (lane == 0 && r < mr) out[(size_t)(m0 + r) * N + n] = s;
    }
}
