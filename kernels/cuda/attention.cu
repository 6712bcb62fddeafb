// Paged causal grouped-query attention over an encoded KV cache, serving
// prefill (n > 1) and decode (n == 1) alike. One block per (query row i,
// head h): query i sits at position start+i and attends to positions
// lo..start+i (lo = start+i-window+1 with a sliding window, else 0; pages
// before lo are never read), reading KV head h / (heads / kv_heads) through
// the page table and decoding each element from the cache's encoding
// (kv_load). Keys are scored CHUNK at a time (one warp per key, lanes over
// the head dimension), soft-capped, and folded into the output with an
// online softmax, so shared memory stays head_dim + CHUNK floats whatever
// the context length. A sink logit per head joins the denominator at the
// end. Values have their own head dim; a latent (MLA) cache reads them as
// the first v_head_dim elements of the key row.
#include "common.cuh"

#define ATTN_CHUNK 128
#define ATTN_THREADS 128
#define ATTN_MAX_HEAD_DIM 576
#define ATTN_MAX_V_DIM 512
#define ATTN_DIMS_PER_THREAD (ATTN_MAX_V_DIM / ATTN_THREADS)

// kv_view is one layer's cache as the kernels address it.
struct kv_view {
    const unsigned char *K, *V, *KS, *VS;
    int kv_heads, head_dim, v_head_dim, page_size, dt, vink;
};

// attend computes query row i, head h over positions lo..last of
// page_table. Every thread of the block calls it (it synchronises the
// block).
__device__ __forceinline__ void attend(float* out, const float* q, kv_view c, const float* sinks, const int* page_table,
                                       int last, int i, int h, int heads, float scale, int window, float softcap) {
    extern __shared__ float sm[];
    int hd = c.head_dim, vd = c.v_head_dim, dt = c.dt;
    float* qs = sm;       // head_dim
    float* sc = sm + hd;  // ATTN_CHUNK
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    int krow = c.kv_heads * hd, vrow = c.vink ? krow : c.kv_heads * vd;
    size_t krb = kv_rowbytes(krow, dt), ksb = kv_scalebytes(krow, dt);
    size_t vrb = kv_rowbytes(vrow, dt), vsb = kv_scalebytes(vrow, dt);
    const unsigned char* Vb = c.vink ? c.K : c.V;
    const unsigned char* VSb = c.vink ? c.KS : c.VS;
    int kvh = h / (heads / c.kv_heads);
    size_t khead = kv_rowbytes(kvh * hd, dt), kshead = kv_scalebytes(kvh * hd, dt);
    size_t vhead = c.vink ? 0 : kv_rowbytes(kvh * vd, dt), vshead = c.vink ? 0 : kv_scalebytes(kvh * vd, dt);
    size_t qoff = ((size_t)i * heads + h) * hd;
    for (int x = tid; x < hd; x += blockDim.x) qs[x] = q[qoff + x] * scale;
    __syncthreads();
    int lo = window > 0 ? max(0, last - window + 1) : 0;

    float m = -INFINITY, l = 0.f;
    float acc[ATTN_DIMS_PER_THREAD];
#pragma unroll
    for (int d = 0; d < ATTN_DIMS_PER_THREAD; d++) acc[d] = 0.f;

    for (int base = lo; base <= last; base += ATTN_CHUNK) {
        int cnt = min(ATTN_CHUNK, last + 1 - base);
        for (int j = warp; j < cnt; j += nw) {
            int pos = base + j;
            size_t slot = (size_t)page_table[pos / c.page_size] * c.page_size + pos % c.page_size;
            const unsigned char* kr = c.K + slot * krb + khead;
            const unsigned char* ks = c.KS + slot * ksb + kshead;
            float s = 0.f;
            for (int x = lane; x < hd; x += 32) s += qs[x] * kv_load(kr, ks, x, dt);
            s = warp_sum(s);
            if (softcap > 0.f) s = softcap * tanhf(s / softcap);
            if (lane == 0) sc[j] = s;
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
        for (int d = 0; d < ATTN_DIMS_PER_THREAD; d++) acc[d] *= corr;
        for (int j = 0; j < cnt; j++) {
            int pos = base + j;
            size_t slot = (size_t)page_table[pos / c.page_size] * c.page_size + pos % c.page_size;
            const unsigned char* vr = Vb + slot * vrb + vhead;
            const unsigned char* vs = VSb + slot * vsb + vshead;
            float p = sc[j];
            l += p;
#pragma unroll
            for (int d = 0; d < ATTN_DIMS_PER_THREAD; d++) {
                int x = tid + d * ATTN_THREADS;
                if (x < vd) acc[d] += p * kv_load(vr, vs, x, dt);
            }
        }
        m = nm;
        __syncthreads();
    }
    if (sinks) {
        // The sink is a key without a value: it only joins the denominator.
        float s = sinks[h], nm = fmaxf(m, s), corr = expf(m - nm);
        l = l * corr + expf(s - nm);
#pragma unroll
        for (int d = 0; d < ATTN_DIMS_PER_THREAD; d++) acc[d] *= corr;
    }
    float inv = 1.f / l;
    size_t ooff = ((size_t)i * heads + h) * vd;
#pragma unroll
    for (int d = 0; d < ATTN_DIMS_PER_THREAD; d++) {
        int x = tid + d * ATTN_THREADS;
        if (x < vd) out[ooff + x] = acc[d] * inv;
    }
}

extern "C" __global__ void __launch_bounds__(ATTN_THREADS)
attention(float* out, const float* q, const unsigned char* K, const unsigned char* V, const unsigned char* KS,
          const unsigned char* VS, const float* sinks, const int* meta, int heads, int kv_heads, int head_dim,
          int v_head_dim, int page_size, int dt, int vink, float scale, int window, float softcap) {
    // meta[0] is the start position and meta+1 the page table: both come
    // from device memory so a captured graph replays for any position.
    int i = blockIdx.x, h = blockIdx.y;
    kv_view c = {K, V, KS, VS, kv_heads, head_dim, v_head_dim, page_size, dt, vink};
    attend(out, q, c, sinks, meta + 1, meta[0] + i, i, h, heads, scale, window, softcap);
}

// Batched decode attention: query row i (one token of sequence i) at
// position meta[i] attends through the page table meta + rows + i*stride.
// Grid (rows, heads), as attention.
extern "C" __global__ void __launch_bounds__(ATTN_THREADS)
decode_attention(float* out, const float* q, const unsigned char* K, const unsigned char* V, const unsigned char* KS,
                 const unsigned char* VS, const float* sinks, const int* meta, int rows, int stride, int heads,
                 int kv_heads, int head_dim, int v_head_dim, int page_size, int dt, int vink, float scale, int window,
                 float softcap) {
    int i = blockIdx.x, h = blockIdx.y;
    kv_view c = {K, V, KS, VS, kv_heads, head_dim, v_head_dim, page_size, dt, vink};
    attend(out, q, c, sinks, meta + rows + (size_t)i * stride, meta[i], i, h, heads, scale, window, softcap);
}
