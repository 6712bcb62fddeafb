// KV write into pages: row j of k and v (kv_heads*head_dim floats) goes to
// slot page_table[(start+j)/page_size]*page_size + (start+j)%page_size of the
// layer's K and V arenas, where meta[0] is start and meta+1 the page table
// (device memory, so graphs replay at any position). One block per row. The
// host has checked every page.
#include "common.cuh"

extern "C" __global__ void write_kv_f32(float* K, float* V, const float* k, const float* v,
                                        const int* meta, int page_size, int row) {
    const int* page_table = meta + 1;
    int pos = meta[0] + blockIdx.x;
    size_t slot = (size_t)page_table[pos / page_size] * page_size + pos % page_size;
    const float* ks = k + (size_t)blockIdx.x * row;
    const float* vs = v + (size_t)blockIdx.x * row;
    for (int c = threadIdx.x; c < row; c += blockDim.x) {
        K[slot * row + c] = ks[c];
        V[slot * row + c] = vs[c];
    }
}

// Batched decode KV write: row r of k and v goes to position meta[r] of the
// sequence whose page table is meta + rows + r*stride (positions first, then
// rows tables of stride pages, all in device memory so a captured graph reads
// each replay's values). One block per row. The host has checked every page.
extern "C" __global__ void write_kv_rows_f32(float* K, float* V, const float* k, const float* v,
                                             const int* meta, int rows, int stride, int page_size, int row) {
    int r = blockIdx.x;
    int pos = meta[r];
    const int* page_table = meta + rows + (size_t)r * stride;
    size_t slot = (size_t)page_table[pos / page_size] * page_size + pos % page_size;
    const float* ks = k + (size_t)r * row;
    const float* vs = v + (size_t)r * row;
    for (int c = threadIdx.x; c < row; c += blockDim.x) {
        K[slot * row + c] = ks[c];
        V[slot * row + c] = vs[c];
    }
}
