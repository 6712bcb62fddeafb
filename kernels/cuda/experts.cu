// Mixture-of-experts routing on the device, the same rules as kernels/cpu
// (moe.go, moe_group.go): a router per token, grouping of the (token,
// choice) pairs by expert with a stable counting sort, and the weighted
// scatter-add back to token rows. Expert ids, offsets, tokens and slots are
// int32 device arrays; nothing is staged from the host.
#include "common.cuh"

#define ROUTE_MAX_EXPERTS 1024 // kernels/cpu.MaxRouterExperts
#define ROUTE_MAX_GROUPS 64    // kernels/cpu.MaxRouterGroups
#define ROUTE_MAX_TOPK 64      // the weights of one token live in shared memory
#define ROUTE_THREADS 256      // routeThreads in host/device/cuda
#define GROUP_THREADS 1024     // groupThreads in host/device/cuda

// Scoring and group scoring, numbered as kernels/cpu.RouterScoring and
// GroupScoring.
#define SCORE_SOFTMAX 0
#define SCORE_SIGMOID 1
#define SCORE_SOFTMAX_TOPK 2
#define GROUP_MAX 0
#define GROUP_TOP2_SUM 1

// better: a beats b when larger; NaN loses to every number (kernels/cpu's
// better). Callers break equal values by the lower index.
__device__ __forceinline__ bool better(float a, float b) { return a > b || (b != b && a == a); }

// beats orders (value, index) candidates: better value, else lower index
// among equal values (or among NaNs). An index < 0 is no candidate.
__device__ __forceinline__ bool beats(float av, int ai, float bv, int bi) {
    if (ai < 0) return false;
    if (bi < 0) return true;
    if (better(av, bv)) return true;
    if (better(bv, av)) return false;
    return ai < bi;
}

// block_best reduces each thread's candidate to the block's best; every
// thread gets it. wv/wi need 32 entries of shared memory.
__device__ __forceinline__ void block_best(float& v, int& i, float* wv, int* wi) {
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (beats(ov, oi, v, i)) { v = ov; i = oi; }
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) { wv[warp] = v; wi[warp] = i; }
    __syncthreads();
    v = lane < nw ? wv[lane] : 0.f;
    i = lane < nw ? wi[lane] : -1;
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (beats(ov, oi, v, i)) { v = ov; i = oi; }
    }
}

// block_sum_d sums a double over the block; every thread gets it.
__device__ __forceinline__ double block_sum_d(double v, double* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// route_f32: one block per token. logits [n, experts] becomes the scores (as
// on the CPU); ids and weights [n, topk] receive the choices in descending
// selection order. bias is null or experts values added for selection only.
extern "C" __global__ void route_f32(float* logits, const float* bias, int* ids, float* weights,
                                     int experts, int topk, int scoring, int groups, int topk_groups,
                                     int group_scoring, int norm, float scale) {
    __shared__ float s[ROUTE_MAX_EXPERTS];
    __shared__ float sel[ROUTE_MAX_EXPERTS];
    __shared__ unsigned char excl[ROUTE_MAX_EXPERTS];
    __shared__ float gs[ROUTE_MAX_GROUPS];
    __shared__ unsigned char chosen[ROUTE_MAX_GROUPS];
    __shared__ float wv[32];
    __shared__ int wi[32];
    __shared__ double red[32];
    __shared__ int out_id[ROUTE_MAX_TOPK];
    float* row = logits + (size_t)blockIdx.x * experts;

    for (int e = threadIdx.x; e < experts; e += blockDim.x) s[e] = row[e];
    __syncthreads();
    if (scoring == SCORE_SOFTMAX) {
        float mx = -INFINITY;
        for (int e = threadIdx.x; e < experts; e += blockDim.x) mx = fmaxf(mx, s[e]);
        float m = block_max(mx, wv);
        double part = 0.0;
        for (int e = threadIdx.x; e < experts; e += blockDim.x) {
            float v = expf(s[e] - m);
            s[e] = v;
            part += (double)v;
        }
        double sum = block_sum_d(part, red);
        float inv = (float)(1.0 / sum);
        for (int e = threadIdx.x; e < experts; e += blockDim.x) s[e] *= inv;
    } else if (scoring == SCORE_SIGMOID) {
        for (int e = threadIdx.x; e < experts; e += blockDim.x) s[e] = 1.f / (1.f + expf(-s[e]));
    }
    __syncthreads();
    for (int e = threadIdx.x; e < experts; e += blockDim.x) {
        row[e] = s[e];
        sel[e] = bias ? s[e] + bias[e] : s[e];
        excl[e] = 0;
    }
    __syncthreads();

    if (groups > 1) {
        int size = experts / groups;
        for (int g = threadIdx.x; g < groups; g += blockDim.x) {
            float b1 = NAN, b2 = NAN;
            for (int e = g * size; e < (g + 1) * size; e++) {
                float v = sel[e];
                if (better(v, b1)) { b2 = b1; b1 = v; }
                else if (better(v, b2)) b2 = v;
            }
            gs[g] = group_scoring == GROUP_TOP2_SUM ? b1 + b2 : b1;
            chosen[g] = 0;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int j = 0; j < topk_groups; j++) {
                int best = -1;
                for (int g = 0; g < groups; g++)
                    if (!chosen[g] && (best < 0 || better(gs[g], gs[best]))) best = g;
                chosen[best] = 1;
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < experts; e += blockDim.x)
            if (!chosen[e / size]) excl[e] = 1;
        __syncthreads();
    }

    for (int j = 0; j < topk; j++) {
        float bv = 0.f;
        int bi = -1;
        for (int e = threadIdx.x; e < experts; e += blockDim.x)
            if (!excl[e] && beats(sel[e], e, bv, bi)) { bv = sel[e]; bi = e; }
        block_best(bv, bi, wv, wi);
        if (threadIdx.x == 0) {
            excl[bi] = 1;
            out_id[j] = bi;
        }
        __syncthreads();
    }

    if (threadIdx.x == 0) {
        int* oid = ids + (size_t)blockIdx.x * topk;
        float* ow = weights + (size_t)blockIdx.x * topk;
        for (int j = 0; j < topk; j++) {
            oid[j] = out_id[j];
            ow[j] = s[out_id[j]];
        }
        if (scoring == SCORE_SOFTMAX_TOPK) {
            float m = -INFINITY;
            for (int j = 0; j < topk; j++) m = fmaxf(m, ow[j]);
            double sum = 0.0;
            for (int j = 0; j < topk; j++) {
                ow[j] = expf(ow[j] - m);
                sum += (double)ow[j];
            }
            float inv = (float)(1.0 / sum);
            for (int j = 0; j < topk; j++) ow[j] *= inv;
        }
        float sc = scale == 0.f ? 1.f : scale;
        if (norm) {
            double sum = 0.0;
            for (int j = 0; j < topk; j++) sum += (double)ow[j];
            if (sum > 0.0) sc = (float)((double)sc / sum);
        }
        if (sc != 1.f)
            for (int j = 0; j < topk; j++) ow[j] *= sc;
    }
}

// group_experts: one block of GROUP_THREADS. Counts each expert's (token,
// choice) pairs, scans them into offsets [experts+1], then one warp places
// the pairs in order, 32 at a time: lanes routed to the same expert are
// ranked by lane (__match_any_sync), so each expert's rows stay in token
// order and the result equals kernels/cpu's counting sort exactly. An id
// outside [0, experts) is dropped (the router never writes one).
extern "C" __global__ void group_experts(const int* ids, const float* w, int nk, int k, int experts,
                                         int* offsets, int* tokens, float* gweights, int* slots) {
    __shared__ int cnt[ROUTE_MAX_EXPERTS + 1];
    for (int e = threadIdx.x; e <= experts; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < nk; i += blockDim.x) {
        int e = ids[i];
        if ((unsigned)e < (unsigned)experts) atomicAdd(&cnt[e + 1], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int e = 0; e < experts; e++) cnt[e + 1] += cnt[e];
        for (int e = 0; e <= experts; e++) offsets[e] = cnt[e];
    }
    __syncthreads();
    if (threadIdx.x >= 32) return;
    int lane = threadIdx.x;
    unsigned lt = (1u << lane) - 1u;
    for (int base = 0; base < nk; base += 32) {
        int i = base + lane;
        int e = i < nk ? ids[i] : -1;
        if ((unsigned)e >= (unsigned)experts) e = -1;
        unsigned mask = __match_any_sync(0xffffffffu, e);
        int rank = __popc(mask & lt);
        int pos = e >= 0 ? cnt[e] + rank : 0;
        __syncwarp();
        if (e >= 0 && lane == __ffs(mask) - 1) cnt[e] += __popc(mask);
        __syncwarp();
        if (e >= 0) {
            tokens[pos] = i / k;
            gweights[pos] = w[i];
            slots[i] = pos;
        }
    }
}

// scatter_add_f32: one block per token; out[i] (=|+=) Σ_j gw[s]·y[s], s =
// slots[i*k+j] in choice order (fmaf, as the CPU's axpy).
extern "C" __global__ void scatter_add_f32(float* out, const float* y, const int* slots, const float* gw,
                                           int k, int dim, int accumulate) {
    const int* sl = slots + (size_t)blockIdx.x * k;
    float* o = out + (size_t)blockIdx.x * dim;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
        float acc = accumulate ? o[c] : 0.f;
        for (int j = 0; j < k; j++) {
            int s = sl[j];
            acc = fmaf(gw[s], y[(size_t)s * dim + c], acc);
        }
        o[c] = acc;
    }
}
