// Row-major linear-layer GEMMs as column-major cuBLASLt problems (kernels/cuda/gemm_mapping.h).
#include "kernels/cuda/gemm_mapping.h"

namespace megatrain::cuda {

// Read column-major: inp is inpᵀ (C × N, ld C), weight is weightᵀ (C × OC, ld C), dout is doutᵀ
// (OC × N, ld OC); out, dinp and dweight are likewise their transposes.
ColumnMajorGemm gemm_mapping(GemmPass pass, int64_t N, int64_t C, int64_t OC) {
  switch (pass) {
    case GemmPass::forward:  // outᵀ (OC × N) = weight (OC × C) · inpᵀ (C × N)
      return {GemmOperand::weight, GemmOperand::inp, true, false, OC, N, C, C, C, OC, 0.0f};
    case GemmPass::dinp:  // dinpᵀ (C × N) = weightᵀ (C × OC) · doutᵀ (OC × N)
      return {GemmOperand::weight, GemmOperand::dout, false, false, C, N, OC, C, OC, C, 0.0f};
    case GemmPass::dweight:  // dweightᵀ (C × OC) += inpᵀ (C × N) · dout (N × OC)
      return {GemmOperand::inp, GemmOperand::dout, false, true, C, OC, N, C, OC, C, 1.0f};
  }
  return {};
}

}  // namespace megatrain::cuda
