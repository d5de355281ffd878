// What the two sublayers of a block (model/attention.h, model/mlp.h) share: where their dropout
// masks come from, how a norm output enters the tensor-parallel region, and the scratch buffers
// reused by every block of a micro-batch.
#pragma once
#include "kernels/ops.h"
#include "model/config.h"
#include "model/norm.h"
#include "model/params.h"
#include "parallel/mappings.h"

namespace megatrain {

// Dropout randomness of one block application: element e of site k's (Nl, C) rows uses
// RngKey{seed, dropout, stream_base + k, offset + e}; `offset` includes this rank's first row, so
// the masks equal the single process's. Probability 0 disables it.
struct DropoutSite {
  float p = 0.0f;
  uint64_t seed = 0;
  uint32_t stream_base = 0;
  uint64_t offset = 0;
};
inline constexpr uint32_t kSiteAttn = 0, kSiteMlp = 1;  // the site of each sublayer's output dropout

// What a split backward (model/linear.h) keeps of one sublayer for its deferred weight-gradient
// step: the output gradients of its input projection (QKV or FC; full rows) and of its output
// projection ((N, C), gathered with sequence parallelism). Empty: weight gradients at once.
struct WeightGradInputs {
  Tensor d_in_proj, d_out_proj;
  bool deferred() const { return d_in_proj.data != nullptr; }
};

// Buffers reused by every block of a micro-batch step (not saved).
struct BlockScratch {
  Tensor proj;     // (Nl, C)  projection outputs / dropout-masked gradients
  Tensor partial;  // (N, C)   row-parallel partial sums, gathered gradients (= proj without SP)
  Tensor dfull;    // (N, C)   input gradient of a column-parallel layer before its reduction (SP only)
  Tensor gathered; // (N, C)   a norm output gathered from the sequence shards (SP only), f32 bytes
                   //          seen in the norm output's dtype
  Tensor dnorm;    // (Nl, C)  gradient at a norm output
  Tensor dmid;     // (Nl, C)  gradient at x_mid
  Tensor datt;     // (N, Hl·D)
  Tensor dqkv;     // like the attention's qkv (shape and dtype)
  Tensor dfc;      // like the MLP's fc (shape and dtype)
  Tensor dact;     // (N, Fl)
};

// A norm output entered into the tp region: gathered into `gathered` with sequence parallelism
// (again in backward, as Megatron does, instead of saving N rows per layer), else the output itself.
Tensor enter_region(const TensorParallel& tp, const NormActivations& norm, Tensor gathered);
// The full-rows buffer of a region boundary: `scratch` with sequence parallelism, else `local`.
Tensor full_rows(const TensorParallel& tp, Tensor local, Tensor scratch);
// Inverted dropout at site `site` applied to x in place (nothing when drop.p = 0).
void apply_dropout(const Stream& s, Tensor x, const DropoutSite& drop, uint32_t site);
// The gradient through that dropout: dout itself when off, else the masked copy in `scratch`.
Tensor through_dropout(const Stream& s, Tensor dout, Tensor scratch, const DropoutSite& drop, uint32_t site);
// This rank's heads, key/value heads and MLP units.
LocalDims local_of(const ModelConfig& cfg, const TpShape& tp);

}  // namespace megatrain
