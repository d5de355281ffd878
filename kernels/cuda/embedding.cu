// Token embedding of a vocabulary shard and learned position embedding, forward and backward, on
// the GPU. Forward passes are row copies (a block per row, float4 where aligned). The backward
// passes are deterministic without float atomics, and bitwise the CPU's: every gradient row adds
// its contributions in the CPU's order (token order, row order), one thread per column keeping the
// running sum in a register.
// Token backward: the tokens are first stably sorted by their row in the shard (a rank sort: token
// i goes to position #{j : key_j < key_i, or key_j = key_i and j < i}, exact integer counts), so
// the tokens of one row are a run of the sorted order, in token order; the block at the run's start
// then adds the run into that row. The sort costs N² comparisons from shared memory spread over the
// GPU (8k tokens: 67M, some microseconds on an H100), nothing that grows with the vocabulary.
#include <climits>

#include "kernels/cuda/elementwise.cuh"

namespace megatrain::MT_CUDA_NS {
namespace {

constexpr int kSortThreads = 256;

struct EmbeddingForward {
  float* out;
  const int32_t* tokens;
  const float* wte;
  int V, C, vocab_begin;
  template <int W>
  __device__ void apply(int64_t i, int c) const {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
    float v[W] = {};
    if (row >= 0 && row < V) load<W>(v, wte + row * C + c);
    store<W>(out + i * C + c, v);
  }
};

// The sort key of token i: its row in the shard, or V (after every row) for another shard's token.
__device__ inline int shard_key(const int32_t* tokens, int i, int V, int vocab_begin) {
  const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
  return row >= 0 && row < V ? static_cast<int>(row) : V;
}

// rank[i] += #{j in this block's chunk of tokens : key_j < key_i, or key_j = key_i and j < i}. The
// grid is token tiles × chunks of the j range, so the N² comparisons spread over the whole GPU; the
// chunks' counts meet in integer atomics, exact in any order.
__global__ void rank_kernel(int32_t* rank, const int32_t* tokens, int N, int V, int vocab_begin, int chunk) {
  __shared__ int tile[kSortThreads];
  const int i = static_cast<int>(blockIdx.x) * kSortThreads + static_cast<int>(threadIdx.x);
  const int mine = i < N ? shard_key(tokens, i, V, vocab_begin) : INT_MAX;
  const int j_begin = static_cast<int>(blockIdx.y) * chunk;
  const int j_end = N - j_begin < chunk ? N : j_begin + chunk;
  int before = 0;
  for (int j0 = j_begin; j0 < j_end; j0 += kSortThreads) {
    const int j = j0 + static_cast<int>(threadIdx.x);
    tile[threadIdx.x] = j < j_end ? shard_key(tokens, j, V, vocab_begin) : INT_MAX;
    __syncthreads();
    const int m = j_end - j0 < kSortThreads ? j_end - j0 : kSortThreads;
    for (int k = 0; k < m; ++k) before += tile[k] < mine || (tile[k] == mine && j0 + k < i);
    __syncthreads();
  }
  if (i < N && before > 0) atomicAdd(rank + i, before);
}

struct Zero {
  int32_t* x;
  template <int W>
  __device__ void apply(int64_t i) const {
    for (int k = 0; k < W; ++k) x[i + k] = 0;
  }
};

// order[p] = the token at sorted position p, key[p] its key.
struct Scatter {
  int32_t *order, *key;
  const int32_t *rank, *tokens;
  int V, vocab_begin;
  template <int W>
  __device__ void apply(int64_t i) const {
    for (int k = 0; k < W; ++k) {
      order[rank[i + k]] = static_cast<int>(i + k);
      key[rank[i + k]] = shard_key(tokens, static_cast<int>(i + k), V, vocab_begin);
    }
  }
};

// Sorted position p starting a run of row r (key r < V): dwte[r] += dout of the run's tokens, in order.
struct EmbeddingBackward {
  float* dwte;
  const float* dout;
  const int32_t *order, *key;
  int N, V, C;
  template <int W>
  __device__ void apply(int64_t p, int c) const {
    const int r = key[p];
    if (r >= V || (p > 0 && key[p - 1] == r)) return;
    float* d = dwte + static_cast<int64_t>(r) * C + c;
    float acc[W], g[W];
    load<W>(acc, d);
    for (int64_t q = p; q < N && key[q] == r; ++q) {
      load<W>(g, dout + static_cast<int64_t>(order[q]) * C + c);
      for (int k = 0; k < W; ++k) acc[k] += g[k];
    }
    store<W>(d, acc);
  }
};

struct PositionForward {
  float* out;
  const float* wpe;
  int C, T;
  int64_t first_row;
  template <int W>
  __device__ void apply(int64_t i, int c) const {
    float y[W], p[W];
    load<W>(y, out + i * C + c);
    load<W>(p, wpe + (first_row + i) % T * C + c);
    for (int k = 0; k < W; ++k) y[k] += p[k];
    store<W>(out + i * C + c, y);
  }
};

// Position t: dwpe[t] += the rows i ≡ t − first_row (mod T), in row order.
struct PositionBackward {
  float* dwpe;
  const float* dout;
  int64_t n;
  int C, T;
  int64_t first_row;
  template <int W>
  __device__ void apply(int64_t t, int c) const {
    float acc[W], g[W];
    load<W>(acc, dwpe + t * C + c);
    for (int64_t i = ((t - first_row) % T + T) % T; i < n; i += T) {
      load<W>(g, dout + i * C + c);
      for (int k = 0; k < W; ++k) acc[k] += g[k];
    }
    store<W>(dwpe + t * C + c, acc);
  }
};

}  // namespace

void embedding_forward(cudaStream_t stream, float* out, const int32_t* tokens, const float* wte, int64_t N, int V,
                       int C, int vocab_begin) {
  row_map(stream, N, C, C % 4 == 0 && aligned16(out, wte), EmbeddingForward{out, tokens, wte, V, C, vocab_begin});
}

size_t embedding_backward_scratch_ints(int64_t N) { return 3 * static_cast<size_t>(N); }

void embedding_backward(cudaStream_t stream, float* dwte, const float* dout, const int32_t* tokens, int64_t N, int V,
                        int C, int vocab_begin, int32_t* scratch) {
  if (N <= 0) return;
  const int n = static_cast<int>(N);
  int32_t *order = scratch, *key = scratch + N, *rank = scratch + 2 * N;
  // About four blocks per SM: the j range in chunks (whole tiles) so that tiles × chunks ≈ 4 · SMs.
  const int tiles = static_cast<int>(ceil_div(N, kSortThreads));
  const int want = static_cast<int>(ceil_div(4LL * sm_count(), tiles));
  const int chunks = want < 1 ? 1 : (want > tiles ? tiles : want);
  const int chunk = static_cast<int>(ceil_div(ceil_div(N, chunks), kSortThreads)) * kSortThreads;
  flat_map(stream, N, false, Zero{rank});
  launch(rank_kernel, dim3(static_cast<unsigned>(tiles), ceil_div(N, chunk)), dim3(kSortThreads), 0, stream, rank,
         tokens, n, V, vocab_begin, chunk);
  flat_map(stream, N, false, Scatter{order, key, rank, tokens, V, vocab_begin});
  row_map(stream, N, C, C % 4 == 0 && aligned16(dwte, dout), EmbeddingBackward{dwte, dout, order, key, n, V, C});
}

void position_embedding_forward(cudaStream_t stream, float* out, const float* wpe, int64_t n, int C, int T,
                                int64_t first_row) {
  row_map(stream, n, C, C % 4 == 0 && aligned16(out, wpe), PositionForward{out, wpe, C, T, first_row});
}

void position_embedding_backward(cudaStream_t stream, float* dwpe, const float* dout, int64_t n, int C, int T,
                                 int64_t first_row) {
  if (n <= 0) return;
  row_map(stream, T, C, C % 4 == 0 && aligned16(dwpe, dout), PositionBackward{dwpe, dout, n, C, T, first_row});
}

}  // namespace megatrain::MT_CUDA_NS
