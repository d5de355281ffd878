// The fallback order of the linear-layer GEMMs (kernels/cuda/gemm_fallback.h).
#include "kernels/cuda/gemm_fallback.h"

#include <fmt/format.h>

namespace megatrain::cuda {

GemmAttempt gemm_first_attempt(bool epilogue) { return {epilogue ? GemmRoute::fused : GemmRoute::plain, 0}; }

GemmAttempt gemm_next_attempt(GemmAttempt failed, int algorithms) {
  switch (failed.route) {
    case GemmRoute::fused:
    case GemmRoute::plain:
      if (failed.algorithm + 1 < algorithms && failed.algorithm + 1 < kGemmAlgorithms)
        return {failed.route, failed.algorithm + 1};
      return {failed.route == GemmRoute::fused ? GemmRoute::plain : GemmRoute::gemm_ex, 0};
    case GemmRoute::gemm_ex:
    case GemmRoute::none: return {GemmRoute::none, 0};
  }
  return {GemmRoute::none, 0};
}

bool gemm_epilogue_separate(GemmRoute route) { return route == GemmRoute::plain || route == GemmRoute::gemm_ex; }

std::string gemm_attempt_name(GemmAttempt attempt) {
  switch (attempt.route) {
    case GemmRoute::fused: return fmt::format("cuBLASLt algorithm {} with the epilogue fused", attempt.algorithm);
    case GemmRoute::plain: return fmt::format("cuBLASLt algorithm {} without an epilogue", attempt.algorithm);
    case GemmRoute::gemm_ex: return "cublasGemmEx";
    case GemmRoute::none: return "nothing (every way failed)";
  }
  return "";
}

}  // namespace megatrain::cuda
