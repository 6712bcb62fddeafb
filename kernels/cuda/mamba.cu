// Mamba-2 mixer kernels (Nemotron-H, Granite-4.0-H): the causal depthwise
// convolution with its rolling state, the selective state-space scan (a
// decode update and a prefill scan), the grouped gated RMSNorm, and the
// elementwise operations the hybrids add (squared ReLU, scaling). Layouts
// and semantics are kernels/cpu's (kernels/cpu/mamba.go), which gpu-check
// compares against:
//   xbc rows of C = inner + 2·G·N values (x, B, C); dt rows of H raw values;
//   y rows of inner = H·P values;
//   conv state per slot: (K-1) rows of C values, oldest first, stored as
//   f32, f16 or bf16 (state_type, numbered as host/device.DType);
//   SSM state per slot: H blocks of N×P f32 ([head][state][head_dim]).
// A batch is nseq sequences: starts[q]..starts[q+1] are sequence q's rows,
// slots[q] its state slot in the pools.
#include "common.cuh"

#define MAMBA_MAXK 8   // largest conv kernel (kernels/cpu MaxConvKernel)
#define SCAN_MAXS 32   // state rows a prefill-scan thread keeps in registers

__device__ __forceinline__ float silu_f(float v) { return v / (1.f + __expf(-v)); }

__device__ __forceinline__ float state_load(const unsigned char* p, size_t i, int t) {
    switch (t) {
    case DT_F16: return f16_at(p + 2 * i);
    case DT_BF16: return bf16_at(p + 2 * i);
    default: return reinterpret_cast<const float*>(p)[i];
    }
}

__device__ __forceinline__ void state_store(unsigned char* p, size_t i, int t, float v) {
    switch (t) {
    case DT_F16: *reinterpret_cast<__half*>(p + 2 * i) = __float2half_rn(v); break;
    case DT_BF16: *reinterpret_cast<__nv_bfloat16*>(p + 2 * i) = __float2bfloat16_rn(v); break;
    default: reinterpret_cast<float*>(p)[i] = v;
    }
}

// softplus (threshold 20, as torch and the Triton kernels) then the
// time-step clamp.
__device__ __forceinline__ float dt_of(float raw, float bias, float lo, float hi) {
    float v = raw + bias;
    if (v <= 20.f) v = log1pf(expf(v));
    return fminf(fmaxf(v, lo), hi);
}

// mamba_conv: grid (ceil(C/blockDim), nseq). Thread c of sequence q walks
// the sequence's rows with the last K-1 inputs in registers:
// out = silu(bias + Σ_k w[c][k]·u[t+k]), u = state rows then xbc rows; the
// state keeps the last K-1 rows of u. out may be xbc.
extern "C" __global__ void mamba_conv(float* out, const float* xbc, const float* w, const float* bias,
                                      unsigned char* pool, long long slot_bytes, int state_type,
                                      const int* starts, const int* slots, int C, int K) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int q = blockIdx.y;
    if (c >= C) return;
    int r0 = starts[q], n = starts[q + 1] - r0;
    if (n <= 0) return;
    unsigned char* st = pool + (size_t)slots[q] * (size_t)slot_bytes;
    float win[MAMBA_MAXK - 1], wc[MAMBA_MAXK];
#pragma unroll
    for (int k = 0; k < MAMBA_MAXK; k++) wc[k] = k < K ? w[(size_t)c * K + k] : 0.f;
#pragma unroll
    for (int k = 0; k < MAMBA_MAXK - 1; k++) win[k] = k < K - 1 ? state_load(st, (size_t)k * C + c, state_type) : 0.f;
    float b = bias ? bias[c] : 0.f;
    for (int t = 0; t < n; t++) {
        size_t i = (size_t)(r0 + t) * C + c;
        float v = xbc[i];
        float acc = b;
#pragma unroll
        for (int k = 0; k < MAMBA_MAXK - 1; k++)
            if (k < K - 1) acc = fmaf(wc[k], win[k], acc);
        float wl = 0.f;
#pragma unroll
        for (int k = 0; k < MAMBA_MAXK; k++)
            if (k == K - 1) wl = wc[k];
        acc = fmaf(wl, v, acc);
#pragma unroll
        for (int k = 0; k < MAMBA_MAXK - 2; k++)
            if (k < K - 2) win[k] = win[k + 1];
#pragma unroll
        for (int k = 0; k < MAMBA_MAXK - 1; k++)
            if (k == K - 2) win[k] = v;
        out[i] = silu_f(acc);
    }
#pragma unroll
    for (int k = 0; k < MAMBA_MAXK - 1; k++)
        if (k < K - 1) state_store(st, (size_t)k * C + c, state_type, win[k]);
}

// mamba_ssm_update: the decode step, one token per sequence (row q of xbc,
// dt and y). Grid (H, nseq), blockDim >= P; dynamic shared memory 2·N
// floats (the group's B and C). Thread p updates column p of the head's
// state: S[s][p] = dA·S[s][p] + B[s]·dt·x[p], y[p] = Σ_s C[s]·S[s][p] + D·x[p].
extern "C" __global__ void mamba_ssm_update(float* y, const float* xbc, const float* dt, const float* A,
                                            const float* D, const float* dt_bias, float* pool,
                                            const int* slots, int H, int P, int G, int N,
                                            float dt_min, float dt_max) {
    extern __shared__ float sh[];
    int h = blockIdx.x, q = blockIdx.y, p = threadIdx.x;
    int inner = H * P, C = inner + 2 * G * N, g = h / (H / G);
    const float* row = xbc + (size_t)q * C;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        sh[i] = row[inner + g * N + i];
        sh[N + i] = row[inner + G * N + g * N + i];
    }
    __syncthreads();
    if (p >= P) return;
    float d = dt_of(dt[(size_t)q * H + h], dt_bias[h], dt_min, dt_max);
    float dA = expf(d * A[h]);
    float x = row[h * P + p], xdt = d * x;
    float* S = pool + ((size_t)slots[q] * H + h) * (size_t)N * P;
    float acc = 0.f;
    for (int s = 0; s < N; s++) {
        float v = fmaf(S[(size_t)s * P + p], dA, sh[s] * xdt);
        S[(size_t)s * P + p] = v;
        acc = fmaf(sh[N + s], v, acc);
    }
    y[(size_t)q * inner + h * P + p] = acc + D[h] * x;
}

// mamba_chunk_scan: the prefill scan of sequences of any length. Grid
// (H, nseq), blockDim = P·R: thread (p, r) = (tid % P, tid / P) keeps state
// rows r, r+R, ... (at most SCAN_MAXS) of column p in registers for the
// whole sequence, so the state is read and written once per call; tokens
// go through shared memory in chunks of Q (B, C, x and dt of Q rows, staged
// with coalesced loads), and the R partial sums of each y[p] meet in shared
// memory. Dynamic shared memory: Q·(2N+P+1) + R·P floats.
extern "C" __global__ void mamba_chunk_scan(float* y, const float* xbc, const float* dt, const float* A,
                                            const float* D, const float* dt_bias, float* pool,
                                            const int* starts, const int* slots, int H, int P, int G,
                                            int N, int R, int Q, float dt_min, float dt_max) {
    extern __shared__ float sh[];
    float* Bs = sh;                 // [Q][N]
    float* Cs = Bs + (size_t)Q * N; // [Q][N]
    float* xs = Cs + (size_t)Q * N; // [Q][P]
    float* ds = xs + (size_t)Q * P; // [Q]
    float* part = ds + Q;           // [R][P]
    int h = blockIdx.x, q = blockIdx.y, tid = threadIdx.x;
    int p = tid % P, r = tid / P;
    int inner = H * P, C = inner + 2 * G * N, g = h / (H / G);
    int r0 = starts[q], n = starts[q + 1] - r0;
    if (n <= 0) return;
    float* S = pool + ((size_t)slots[q] * H + h) * (size_t)N * P;
    float hs[SCAN_MAXS];
#pragma unroll
    for (int k = 0; k < SCAN_MAXS; k++) {
        int s = r + k * R;
        hs[k] = s < N ? S[(size_t)s * P + p] : 0.f;
    }
    float a = A[h], dd = D[h], bias = dt_bias[h];
    for (int t0 = 0; t0 < n; t0 += Q) {
        int L = min(Q, n - t0);
        __syncthreads(); // the previous chunk is consumed
        for (int i = tid; i < L * N; i += blockDim.x) {
            const float* row = xbc + (size_t)(r0 + t0 + i / N) * C;
            Bs[i] = row[inner + g * N + i % N];
            Cs[i] = row[inner + G * N + g * N + i % N];
        }
        for (int i = tid; i < L * P; i += blockDim.x)
            xs[i] = xbc[(size_t)(r0 + t0 + i / P) * C + h * P + i % P];
        for (int i = tid; i < L; i += blockDim.x)
            ds[i] = dt_of(dt[(size_t)(r0 + t0 + i) * H + h], bias, dt_min, dt_max);
        __syncthreads();
        for (int t = 0; t < L; t++) {
            float d = ds[t], dA = expf(d * a), x = xs[t * P + p], xdt = d * x;
            const float* b = Bs + (size_t)t * N;
            const float* cv = Cs + (size_t)t * N;
            float acc = 0.f;
#pragma unroll
            for (int k = 0; k < SCAN_MAXS; k++) {
                int s = r + k * R;
                if (s < N) {
                    float v = fmaf(hs[k], dA, b[s] * xdt);
                    hs[k] = v;
                    acc = fmaf(cv[s], v, acc);
                }
            }
            if (tid < P * R) part[r * P + p] = acc;
            __syncthreads();
            if (r == 0) {
                float sum = 0.f;
                for (int rr = 0; rr < R; rr++) sum += part[rr * P + p];
                y[(size_t)(r0 + t0 + t) * inner + h * P + p] = sum + dd * x;
            }
            __syncthreads();
        }
    }
#pragma unroll
    for (int k = 0; k < SCAN_MAXS; k++) {
        int s = r + k * R;
        if (s < N) S[(size_t)s * P + p] = hs[k];
    }
}

// mamba_gated_norm: grid (dim/group, rows), blockDim a multiple of 32.
// g = y·silu(z); out = g / sqrt(mean over the group(g²) + eps) · w. out may
// alias y or z (each thread reads its elements before the reduction and
// writes them after).
extern "C" __global__ void mamba_gated_norm(float* out, const float* y, const float* z, const float* w,
                                            int dim, int group, float eps) {
    __shared__ float red[32];
    size_t base = (size_t)blockIdx.y * dim + (size_t)blockIdx.x * group;
    float ss = 0.f;
    for (int i = threadIdx.x; i < group; i += blockDim.x) {
        float g = y[base + i] * silu_f(z[base + i]);
        ss += g * g;
    }
    ss = block_sum(ss, red);
    float sc = (float)(1.0 / sqrt((double)ss / group + (double)eps));
    const float* wg = w + (size_t)blockIdx.x * group;
    for (int i = threadIdx.x; i < group; i += blockDim.x) {
        float g = y[base + i] * silu_f(z[base + i]);
        out[base + i] = g * sc * wg[i];
    }
}

// relu_sq_f32: out = max(x, 0)² (Nemotron-H's MLP activation).
extern "C" __global__ void relu_sq_f32(float* out, const float* x, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = fmaxf(x[i], 0.f);
        out[i] = v * v;
    }
}

// scale_f32: x *= s (Granite's embedding multiplier and logits scaling).
extern "C" __global__ void scale_f32(float* x, float s, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        x[i] *= s;
}

// add_scaled_f32: out = a + s·b (Granite's scaled residual).
extern "C" __global__ void add_scaled_f32(float* out, const float* a, const float* b, float s, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = fmaf(s, b[i], a[i]);
}
