// cuDNN's fused flash attention for the attention ops (issue: CUDA backend): the cuDNN
// frontend's SDPA graphs, forward and backward, causal, grouped-query, on 16-bit (bf16 or fp16)
// copies of the packed tensors, with float32 softmax statistics and float32 sums inside. The
// tensors are read and written in place through kernels/cuda/sdpa_layout.h's strided views.
// Built where the cuDNN frontend's headers were found (MEGATRAIN_HAS_CUDNN; scripts/setup.sh
// fetches them); the production backend (kernels/cuda/backend_cuda.cpp) chooses it per
// train.attention_backend and converts the float32 activations to and from 16 bits around it.
//
// The statistics are cuDNN's "Stats": max + ln Σ exp(s − max) over a row of scaled scores, the
// ops' lse. A forward and its backward run on the same path, since the saved output is rounded
// differently by each.
#pragma once
#include <memory>
#include <string>

#include "kernels/cuda/cuda.h"

namespace megatrain::cuda {

struct SdpaProblem {
  int B, T, H, Hkv, D;
  Precision precision;  // bf16 or fp16: the element type of qkv, o and their gradients
};

class CudnnAttention {
 public:
  // Its cuDNN handle is made on the current device; workspaces come from `memory`.
  explicit CudnnAttention(CachingAllocator& memory);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // "" when cuDNN runs the problem's forward and backward on this device; otherwise why not, in
  // cuDNN's words. Builds (and keeps) the problem's two execution plans.
  std::string unsupported(const SdpaProblem& p);
  // o (B, T, H·D) and stats (B, H, T) from qkv (B, T, (H + 2·Hkv)·D), enqueued on `stream`.
  void forward(cudaStream_t stream, const SdpaProblem& p, void* o, float* stats, const void* qkv);
  // dqkv (B, T, (H + 2·Hkv)·D, written whole) from dout (B, T, H·D), qkv, o and stats.
  void backward(cudaStream_t stream, const SdpaProblem& p, void* dqkv, const void* dout, const void* qkv,
                const void* o, const float* stats);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace megatrain::cuda
