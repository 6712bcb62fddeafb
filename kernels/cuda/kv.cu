// KV writes into pages, encoding each row in the cache's dtype (kernels/cpu
// kvcache.go's layouts and rounding, byte for byte). A row of k (krow
// floats) and of v (vrow floats; none for a latent cache, vink) goes to
// cache row slot = page_table[pos/page_size]·page_size + pos%page_size. One
// block per row; a thread encodes one element, or one scale block (32 for
// mxfp8, 16 for nvfp4: the block's largest magnitude sets its scale). The
// host has checked every page.
#include "common.cuh"

// mx_scale and nvfp4_scale choose block scales as kernels/cpu's mxScale and
// nvfp4Scale.
__device__ __forceinline__ unsigned int mx_scale(float amax) {
    if (amax == 0.f) return 0;
    amax = fminf(amax, 3.402823466e38f);
    int e;
    frexpf(amax, &e);
    int x = e - 1 - 8;
    x = max(-127, min(119, x));
    return (unsigned int)(x + 127);
}

__device__ __forceinline__ unsigned int nvfp4_scale(float amax) {
    if (amax == 0.f) return 0;
    double want = (double)amax / 6.0;
    unsigned int c = e4m3_encode((float)want);
    if (c > 0x7e) c = 0x7e;
    while (c < 0x7e && (double)e4m3_value(c) * 6.0 < (double)amax) c++;
    while (c > 1 && (double)e4m3_value(c - 1) * 6.0 >= (double)amax) c--;
    return c < 1 ? 1 : c;
}

__device__ __forceinline__ unsigned int e2m1_encode(float v, float s) {
    unsigned int sign = signbit(v) ? 8 : 0;
    double a = fabs((double)v), sd = (double)s;
    const double mids[7] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
    unsigned int c = 0;
    for (int i = 0; i < 7; i++) {
        double t = mids[i] * sd;
        if (a > t || (a == t && ((i + 1) & 1) == 0)) c = i + 1;
    }
    return sign | c;
}

// encode_row writes n floats of src as one row of dst (and its scales).
__device__ void encode_row(unsigned char* dst, unsigned char* scales, const float* src, int n, int dt) {
    if (dt == KV_MXFP8 || dt == KV_NVFP4) {
        int blk = dt == KV_MXFP8 ? 32 : 16;
        for (int b = threadIdx.x; b < n / blk; b += blockDim.x) {
            const float* x = src + (size_t)b * blk;
            float amax = 0.f;
            bool nan = false;
            for (int j = 0; j < blk; j++) {
                nan |= isnan(x[j]);
                amax = fmaxf(amax, fabsf(x[j]));
            }
            if (dt == KV_MXFP8) {
                unsigned char* o = dst + (size_t)b * 32;
                if (nan) {
                    scales[b] = 0xff;
                    for (int j = 0; j < 32; j++) o[j] = 0;
                    continue;
                }
                unsigned int s = mx_scale(amax);
                scales[b] = (unsigned char)s;
                float inv = ldexpf(1.f, 127 - (int)s);
                for (int j = 0; j < 32; j++) o[j] = e4m3_encode(x[j] * inv);
            } else {
                unsigned char* o = dst + (size_t)b * 8;
                if (nan) {
                    scales[b] = 0x7f;
                    for (int j = 0; j < 8; j++) o[j] = 0;
                    continue;
                }
                unsigned int c = nvfp4_scale(amax);
                scales[b] = (unsigned char)c;
                float s = e4m3_value(c);
                for (int j = 0; j < 8; j++)
                    o[j] = s == 0.f ? 0 : (unsigned char)(e2m1_encode(x[2 * j], s) | (e2m1_encode(x[2 * j + 1], s) << 4));
            }
        }
        return;
    }
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        float f = src[c];
        switch (dt) {
        case KV_F32: reinterpret_cast<float*>(dst)[c] = f; break;
        case KV_F16: reinterpret_cast<__half*>(dst)[c] = __float2half_rn(f); break;
        case KV_BF16: reinterpret_cast<unsigned short*>(dst)[c] = bf16_bits(f); break;
        case KV_E4M3: dst[c] = e4m3_encode(f); break;
        default: dst[c] = e5m2_encode(f); break;
        }
    }
}

__device__ __forceinline__ void write_row(unsigned char* K, unsigned char* V, unsigned char* KS, unsigned char* VS,
                                          const float* k, const float* v, size_t slot, int krow, int vrow, int dt, int vink) {
    encode_row(K + slot * kv_rowbytes(krow, dt), KS + slot * kv_scalebytes(krow, dt), k, krow, dt);
    if (!vink) encode_row(V + slot * kv_rowbytes(vrow, dt), VS + slot * kv_scalebytes(vrow, dt), v, vrow, dt);
}

// write_kv: row j of k and v is position meta[0]+j of the sequence whose
// page table is meta+1 (device memory, so graphs replay at any position).
extern "C" __global__ void write_kv(unsigned char* K, unsigned char* V, unsigned char* KS, unsigned char* VS,
                                    const float* k, const float* v, const int* meta, int page_size, int krow, int vrow,
                                    int dt, int vink) {
    const int* page_table = meta + 1;
    int pos = meta[0] + blockIdx.x;
    size_t slot = (size_t)page_table[pos / page_size] * page_size + pos % page_size;
    write_row(K, V, KS, VS, k + (size_t)blockIdx.x * krow, vink ? k : v + (size_t)blockIdx.x * vrow, slot, krow, vrow, dt, vink);
}

// write_kv_rows (batched decode): row r of k and v goes to position meta[r]
// of the sequence whose page table is meta + rows + r*stride.
extern "C" __global__ void write_kv_rows(unsigned char* K, unsigned char* V, unsigned char* KS, unsigned char* VS,
                                         const float* k, const float* v, const int* meta, int rows, int stride,
                                         int page_size, int krow, int vrow, int dt, int vink) {
    int r = blockIdx.x;
    int pos = meta[r];
    const int* page_table = meta + rows + (size_t)r * stride;
    size_t slot = (size_t)page_table[pos / page_size] * page_size + pos % page_size;
    write_row(K, V, KS, VS, k + (size_t)r * krow, vink ? k : v + (size_t)r * vrow, slot, krow, vrow, dt, vink);
}
