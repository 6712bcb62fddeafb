// Paged causal grouped-query attention for one sequence, serving prefill
// (n > 1) and decode (n == 1) alike. One block per (query row i, head h):
// query i sits at position start+i and attends to positions 0..start+i,
// reading KV head h / (heads / kv_heads) through the page table. Keys are
// scored CHUNK at a time (one warp per key, lanes over the head dimension)
// and folded into the output with an online softmax, so shared memory stays
// head_dim + CHUNK floats whatever the context length.
#include "common.cuh"

#define ATTN_CHUNK 128
#define ATTN_THREADS 128
#define ATTN_MAX_HEAD_DIM 256
#define ATTN_DIMS_PER_THREAD (ATTN_MAX_HEAD_DIM / ATTN_THREADS)

// attend computes query row i, head h over positions 0..last of page_table.
// Every thread of the block calls it (it synchronises the block).
__device__ __forceinline__ void attend(float* out, const float* q, const float* K, const float* V,
                                       const int* page_table, int last, int i, int h, int heads,
                                       int kv_heads, int head_dim, int page_size, float scale) {
    extern __shared__ float sm[];
    float* qs = sm;                // head_dim
    float* sc = sm + head_dim;     // ATTN_CHUNK
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    int row = kv_heads * head_dim;
    int kvh = h / (heads / kv_heads);
    size_t qoff = ((size_t)i * heads + h) * head_dim;
    for (int x = tid; x < head_dim; x += blockDim.x) qs[x] = q[qoff + x];
    __syncthreads();

    float m = -INFINITY, l = 0.f;
    float acc[ATTN_DIMS_PER_THREAD];
#pragma unroll
    for (int c = 0; c < ATTN_DIMS_PER_THREAD; c++) acc[c] = 0.f;

    for (int base = 0; base <= last; base += ATTN_CHUNK) {
        int cnt = min(ATTN_CHUNK, last + 1 - base);
        for (int j = warp; j < cnt; j += nw) {
            int pos = base + j;
            size_t slot = (size_t)page_table[pos / page_size] * page_size + pos % page_size;
            const float* kr = K + slot * row + (size_t)kvh * head_dim;
            float s = 0.f;
            for (int x = lane; x < head_dim; x += 32) s += qs[x] * kr[x];
            s = warp_sum(s);
            if (lane == 0) sc[j] = s * scale;
        }
        __syncthreads();
        float cm = -INFINITY;
        for (int j = 0; j < cnt; j++) cm = fmaxf(cm, sc[j]);
        float nm = fmaxf(m, cm);
        float corr = expf(m - nm);  // 0 on the first chunk (m = -inf)
        __syncthreads();
        for (int j = tid; j < cnt; j += blockDim.x) sc[j] = expf(sc[j] - nm);
        __syncthreads();
        l *= corr;
#pragma unroll
        for (int c = 0; c < ATTN_DIMS_PER_THREAD; c++) acc[c] *= corr;
        for (int j = 0; j < cnt; j++) {
            int pos = base + j;
            size_t slot = (size_t)page_table[pos / page_size] * page_size + pos % page_size;
            const float* vr = V + slot * row + (size_t)kvh * head_dim;
            float p = sc[j];
            l += p;
#pragma unroll
            for (int c = 0; c < ATTN_DIMS_PER_THREAD; c++) {
                int x = tid + c * ATTN_THREADS;
                if (x < head_dim) acc[c] += p * vr[x];
            }
        }
        m = nm;
        __syncthreads();
    }
    float inv = 1.f / l;
#pragma unroll
    for (int c = 0; c < ATTN_DIMS_PER_THREAD; c++) {
        int x = tid + c * ATTN_THREADS;
        if (x < head_dim) out[qoff + x] = acc[c] * inv;
    }
}

extern "C" __global__ void __launch_bounds__(ATTN_THREADS)
attention_f32(float* out, const float* q, const float* K, const float* V, const int* meta,
              int heads, int kv_heads, int head_dim, int page_size, float scale) {
    // meta[0] is the start position and meta+1 the page table: both come
    // from device memory so a captured graph replays for any position.
    int i = blockIdx.x, h = blockIdx.y;
    attend(out, q, K, V, meta + 1, meta[0] + i, i, h, heads, kv_heads, head_dim, page_size, scale);
}

// Batched decode attention: query row i (one token of sequence i) at
// position meta[i] attends to positions 0..meta[i] through the page table
// meta + rows + i*stride. Grid (rows, heads), as attention_f32.
extern "C" __global__ void __launch_bounds__(ATTN_THREADS)
decode_attention_f32(float* out, const float* q, const float* K, const float* V, const int* meta,
                     int rows, int stride, int heads, int kv_heads, int head_dim, int page_size, float scale) {
    int i = blockIdx.x, h = blockIdx.y;
    attend(out, q, K, V, meta + rows + (size_t)i * stride, meta[i], i, h, heads, kv_heads, head_dim, page_size, scale);
}
