// Rotary position embedding, in place over x [n, heads*head_dim]. Row i is at
// positions[i]; inv_freq holds rot_dim/2 angular frequencies (already scaled,
// computed by the host in float64 exactly as the CPU kernel does). Angles are
// computed in double, as on the CPU, and cos/sin are multiplied by
// attn_factor (YaRN's attention factor, 1 otherwise) before rounding to
// float. The rotated span of each head starts at rot_off (DeepSeek's rope
// part follows its nope dims). neox != 0 rotates (x[j], x[j+rot/2]),
// otherwise adjacent pairs (x[2j], x[2j+1]). One block per row.
#include "common.cuh"

extern "C" __global__ void rope_f32(float* x, const int* positions, const double* inv_freq,
                                    int heads, int head_dim, int rot_dim, int neox, int rot_off,
                                    double attn_factor) {
    int half = rot_dim / 2;
    float* row = x + (size_t)blockIdx.x * heads * head_dim;
    double pos = (double)positions[blockIdx.x];
    for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
        int h = idx / half, j = idx % half;
        double s64, c64;
        sincos(pos * inv_freq[j], &s64, &c64);
        float s = (float)(s64 * attn_factor), c = (float)(c64 * attn_factor);
        int a = rot_off + (neox ? j : 2 * j);
        int b = rot_off + (neox ? j + half : 2 * j + 1);
        float* hp = row + h * head_dim;
        float x0 = hp[a], x1 = hp[b];
        hp[a] = x0 * c - x1 * s;
        hp[b] = x0 * s + x1 * c;
    }
}
