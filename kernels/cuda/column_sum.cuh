// dst[c] += Σ_i term(i, c) over the rows of an (N, C) problem, bitwise reproducible: the rows are
// cut into chunks whose number depends on N alone, each chunk summed in a fixed order by one block
// row, then the chunk sums added in chunk order (no atomics). The weight and bias gradients of the
// norms (and any other column reduction) go through here.
#pragma once
#include "kernels/cuda/common.cuh"

namespace megatrain::MT_CUDA_NS {

constexpr int kColumnTile = 32;  // columns per block: one warp wide, coalesced
constexpr int kRowLanes = 8;     // rows a block reads at once

inline int column_chunks(int64_t N) {
  const long long chunks = (N + 255) / 256;
  return static_cast<int>(chunks < 1 ? 1 : (chunks > 64 ? 64 : chunks));
}
inline size_t column_sum_scratch_floats(int64_t N, int C) { return static_cast<size_t>(column_chunks(N)) * C; }

template <class Term>
__global__ void column_partials_kernel(float* partial, int64_t N, int C, int64_t rows_per_chunk, Term term) {
  __shared__ float acc[kRowLanes][kColumnTile];
  const int c = static_cast<int>(blockIdx.x) * kColumnTile + static_cast<int>(threadIdx.x);
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t i1 = i0 + rows_per_chunk < N ? i0 + rows_per_chunk : N;
  float s = 0.0f;
  if (c < C)
    for (int64_t i = i0 + threadIdx.y; i < i1; i += kRowLanes) s += term(i, c);
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0.0f;
    for (int r = 0; r < kRowLanes; ++r) t += acc[r][threadIdx.x];
    partial[static_cast<int64_t>(blockIdx.y) * C + c] = t;
  }
}

template <int = 0>
__global__ void column_finish_kernel(float* dst, const float* partial, int chunks, int C) {
  const int c = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (c >= C) return;
  float t = 0.0f;
  for (int k = 0; k < chunks; ++k) t += partial[static_cast<int64_t>(k) * C + c];
  dst[c] += t;
}

// scratch: column_sum_scratch_floats(N, C) floats.
template <class Term>
void column_sum_accumulate(cudaStream_t stream, float* dst, int64_t N, int C, Term term, float* scratch) {
  const int chunks = column_chunks(N);
  const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
  launch(column_partials_kernel<Term>, dim3(ceil_div(C, kColumnTile), static_cast<unsigned>(chunks)),
         dim3(kColumnTile, kRowLanes), 0, stream, scratch, N, C, rows_per_chunk, term);
  launch(column_finish_kernel<>, dim3(ceil_div(C, 256)), dim3(256), 0, stream, dst, scratch, chunks, C);
}

}  // namespace megatrain::MT_CUDA_NS
