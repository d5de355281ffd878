// LayerNorm and RMSNorm, forward and backward, with the residual add fused into the forward.
// One warp per row (rows are the model width, hundreds to thousands of values): the row's sums are
// warp butterflies; the weight and bias gradients are deterministic column sums (column_sum.cuh).
#include "kernels/cuda/column_sum.cuh"

namespace megatrain::MT_CUDA_NS {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block

// x = inp + residual (stored to residual_out) or inp; returns the row pointer to normalise.
__device__ inline const float* fused_row(float* residual_out, const float* inp, const float* residual, int64_t row,
                                         int C, int lane) {
  const float* x = inp + row * C;
  if (!residual) return x;
  float* r = residual_out + row * C;
  const float* b = residual + row * C;
  for (int c = lane; c < C; c += warpSize) r[c] = x[c] + b[c];  // each lane reads back only its own columns
  return r;
}

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, float* residual_out, const float* inp,
                                         const float* residual, const float* weight, const float* bias, int64_t N,
                                         int C, float eps) {
  const int lane = static_cast<int>(threadIdx.x) % warpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / warpSize;
  if (row >= N) return;
  const float* x = fused_row(residual_out, inp, residual, row, C, lane);
  float sum = 0.0f;
  for (int c = lane; c < C; c += warpSize) sum += x[c];
  const float m = warp_sum(sum) / static_cast<float>(C);
  float var = 0.0f;
  for (int c = lane; c < C; c += warpSize) var += (x[c] - m) * (x[c] - m);
  const float s = rsqrtf(warp_sum(var) / static_cast<float>(C) + eps);
  float* y = out + row * C;
  for (int c = lane; c < C; c += warpSize) y[c] = (x[c] - m) * s * weight[c] + (bias ? bias[c] : 0.0f);
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, float* residual_out, const float* inp,
                                       const float* residual, const float* weight, int64_t N, int C, float eps) {
  const int lane = static_cast<int>(threadIdx.x) % warpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / warpSize;
  if (row >= N) return;
  const float* x = fused_row(residual_out, inp, residual, row, C, lane);
  float ss = 0.0f;
  for (int c = lane; c < C; c += warpSize) ss += x[c] * x[c];
  const float s = rsqrtf(warp_sum(ss) / static_cast<float>(C) + eps);
  float* y = out + row * C;
  for (int c = lane; c < C; c += warpSize) y[c] = x[c] * s * weight[c];
  if (lane == 0) rstd[row] = s;
}

// dx = dresidual + s·(dy·w − mean(dy·w) − x̂·mean(dy·w·x̂)); RMSNorm: mean = 0 and no centring term.
template <bool kRms>
__global__ void norm_backward_kernel(float* dinp, const float* dout, const float* dresidual, const float* inp,
                                     const float* weight, const float* mean, const float* rstd, int64_t N, int C) {
  const int lane = static_cast<int>(threadIdx.x) % warpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / warpSize;
  if (row >= N) return;
  const float* x = inp + row * C;
  const float* dy = dout + row * C;
  const float m = kRms ? 0.0f : mean[row], s = rstd[row];
  float dn_sum = 0.0f, dn_xhat_sum = 0.0f;
  for (int c = lane; c < C; c += warpSize) {
    const float dn = dy[c] * weight[c];
    dn_sum += dn;
    dn_xhat_sum += dn * (x[c] - m) * s;
  }
  const float dn_mean = kRms ? 0.0f : warp_sum(dn_sum) / static_cast<float>(C);
  const float dn_xhat_mean = warp_sum(dn_xhat_sum) / static_cast<float>(C);
  float* dx = dinp + row * C;
  const float* dr = dresidual ? dresidual + row * C : nullptr;
  for (int c = lane; c < C; c += warpSize) {
    const float xhat = (x[c] - m) * s;
    const float g = s * (dy[c] * weight[c] - dn_mean - xhat * dn_xhat_mean);
    dx[c] = dr ? dr[c] + g : g;
  }
}

struct DoutXhat {  // dout · x̂, the weight gradient's term
  const float *dout, *inp, *mean, *rstd;
  int C;
  __device__ float operator()(int64_t i, int c) const {
    return dout[i * C + c] * (inp[i * C + c] - (mean ? mean[i] : 0.0f)) * rstd[i];
  }
};
struct Dout {  // the bias gradient's term
  const float* dout;
  int C;
  __device__ float operator()(int64_t i, int c) const { return dout[i * C + c]; }
};

dim3 row_grid(int64_t N) { return dim3(ceil_div(N, kRowsPerBlock)); }
constexpr unsigned kRowBlock = kRowsPerBlock * 32;

}  // namespace

void layernorm_forward(cudaStream_t stream, float* out, float* mean, float* rstd, float* residual_out,
                       const float* inp, const float* residual, const float* weight, const float* bias, int64_t N,
                       int C, float eps) {
  if (N == 0) return;
  launch(layernorm_forward_kernel, row_grid(N), dim3(kRowBlock), 0, stream, out, mean, rstd, residual_out, inp,
         residual, weight, bias, N, C, eps);
}

void rmsnorm_forward(cudaStream_t stream, float* out, float* rstd, float* residual_out, const float* inp,
                     const float* residual, const float* weight, int64_t N, int C, float eps) {
  if (N == 0) return;
  launch(rmsnorm_forward_kernel, row_grid(N), dim3(kRowBlock), 0, stream, out, rstd, residual_out, inp, residual,
         weight, N, C, eps);
}

size_t norm_backward_scratch_floats(int64_t N, int C) { return column_sum_scratch_floats(N, C); }

void layernorm_backward(cudaStream_t stream, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* dresidual, const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int C, float* scratch) {
  if (N == 0) return;
  launch(norm_backward_kernel<false>, row_grid(N), dim3(kRowBlock), 0, stream, dinp, dout, dresidual, inp, weight,
         mean, rstd, N, C);
  column_sum_accumulate(stream, dweight, N, C, DoutXhat{dout, inp, mean, rstd, C}, scratch);
  if (dbias) column_sum_accumulate(stream, dbias, N, C, Dout{dout, C}, scratch);
}

void rmsnorm_backward(cudaStream_t stream, float* dinp, float* dweight, const float* dout, const float* dresidual,
                      const float* inp, const float* weight, const float* rstd, int64_t N, int C, float* scratch) {
  if (N == 0) return;
  launch(norm_backward_kernel<true>, row_grid(N), dim3(kRowBlock), 0, stream, dinp, dout, dresidual, inp, weight,
         static_cast<const float*>(nullptr), rstd, N, C);
  column_sum_accumulate(stream, dweight, N, C, DoutXhat{dout, inp, nullptr, rstd, C}, scratch);
}

}  // namespace megatrain::MT_CUDA_NS
