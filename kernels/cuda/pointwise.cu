// Elementwise activations of the newer architectures, the same formulas as
// kernels/cpu/act.go: GeGLU with tanh GELU (Gemma), gpt-oss's clamped
// SwiGLU, soft-capping (Gemma 2's final logits) and a scale (Gemma's
// embedding). Grid-stride loops: any grid covers any n.
#include "common.cuh"

#define GELU_C1 1.5957691216057308f  // 2·√(2/π)
#define GELU_C2 0.07135481627159357f // 2·√(2/π)·0.044715

// geglu_tanh_f32: out = g·σ(g·(c1 + c2·g²))·up = gelu_tanh(g)·up.
extern "C" __global__ void geglu_tanh_f32(float* out, const float* gate, const float* up, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float g = gate[i];
        out[i] = g / (1.f + expf(-g * (GELU_C1 + GELU_C2 * g * g))) * up[i];
    }
}

// swiglu_oai_f32: g = min(gate, limit), u = clamp(up, ±limit),
// out = g·σ(alpha·g)·(u + 1).
extern "C" __global__ void swiglu_oai_f32(float* out, const float* gate, const float* up, float alpha,
                                          float limit, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float g = gate[i], u = up[i];
        if (g > limit) g = limit;
        if (u > limit) u = limit;
        if (u < -limit) u = -limit;
        out[i] = g / (1.f + expf(-alpha * g)) * (u + 1.f);
    }
}

// softcap_f32: x = cap·(2/(1 + exp(k·x)) − 1) = cap·tanh(x/cap), k = −2/cap.
extern "C" __global__ void softcap_f32(float* x, float k, float cap, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        x[i] = cap * (2.f / (1.f + expf(k * x[i])) - 1.f);
}

extern "C" __global__ void scale_f32(float* x, float s, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        x[i] *= s;
}
