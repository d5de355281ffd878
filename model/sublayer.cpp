#include "model/sublayer.h"

namespace megatrain {

Tensor enter_region(const TensorParallel& tp, const NormActivations& norm, Tensor gathered) {
  Tensor full = norm.out;
  if (tp.sequence_parallel()) {
    full = gathered;
    full.dtype = norm.out.dtype;  // a bf16 norm output fills the first half of the f32 buffer's bytes
  }
  tp.enter_forward(full, norm.out);
  return full;
}

Tensor full_rows(const TensorParallel& tp, Tensor local, Tensor scratch) {
  return tp.sequence_parallel() ? scratch : local;
}

void apply_dropout(const Stream& s, Tensor x, const DropoutSite& drop, uint32_t site) {
  if (drop.p <= 0.0f) return;
  dropout_apply(s, x, drop.p,
                RngKey{drop.seed, static_cast<uint32_t>(RngPurpose::dropout), drop.stream_base + site, drop.offset});
}

Tensor through_dropout(const Stream& s, Tensor dout, Tensor scratch, const DropoutSite& drop, uint32_t site) {
  if (drop.p <= 0.0f) return dout;
  copy(s, scratch.part(0, dout.shape), dout);
  apply_dropout(s, scratch, drop, site);
  return scratch;
}

LocalDims local_of(const ModelConfig& cfg, const TpShape& tp) {
  return local_dims(cfg, TpCoord{tp.rank(), tp.size()});
}

}  // namespace megatrain
