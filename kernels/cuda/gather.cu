// Gathers: token embedding rows (any weight dtype, widened to f32) and rows
// of an activation matrix (the last position of each sequence before the LM
// head). One block per output row.
#include "quant.cuh"

extern "C" __global__ void embedding(float* out, const unsigned char* table, const int* ids,
                                     int cols, long row_bytes, int dtype) {
    const unsigned char* row = table + (size_t)ids[blockIdx.x] * row_bytes;
    float* o = out + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] = load_elem(row, c, dtype);
}

extern "C" __global__ void gather_rows_f32(float* out, const float* x, const int* idx, int dim) {
    const float* src = x + (size_t)idx[blockIdx.x] * dim;
    float* o = out + (size_t)blockIdx.x * dim;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) o[c] = src[c];
}
