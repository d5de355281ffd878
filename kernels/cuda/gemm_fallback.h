// The order in which a linear-layer GEMM (kernels/cuda/gemm.cu) tries the ways it can run, so that
// a problem cuBLASLt's heuristic has nothing for, or an algorithm cublasLtMatmul refuses, falls back
// (and is logged) instead of stopping the run:
//   1. fused:   cuBLASLt with the epilogue (bias, GELU, bias gradient) fused, each algorithm the
//               heuristic offered (up to kGemmAlgorithms), in its order;
//   2. plain:   cuBLASLt without the epilogue, each offered algorithm; the epilogue then runs as its
//               own kernel (the bias broadcast-add, the GELU kernels, the bias-gradient column sum);
//   3. gemm_ex: cublasGemmEx, cuBLAS's own choice of kernel, and the epilogue's own kernel;
//   4. none:    nothing is left; the caller throws naming every failure.
// A GEMM without an epilogue starts at plain. A route whose heuristic found no algorithm is left
// at once. Pure, so tests/kernels/test_gemm_fallback.cpp checks it without a GPU.
#pragma once
#include <cstdint>
#include <string>

namespace megatrain::cuda {

// Algorithms asked of cuBLASLt's heuristic per problem: the ones after the first are tried only
// when cublasLtMatmul refuses those before them.
inline constexpr int kGemmAlgorithms = 8;

enum class GemmRoute : uint8_t { fused, plain, gemm_ex, none };

struct GemmAttempt {
  GemmRoute route = GemmRoute::none;
  int algorithm = 0;  // index into the route's heuristic results (0 for gemm_ex)
};

// The first attempt of a GEMM with (epilogue true) or without an epilogue.
GemmAttempt gemm_first_attempt(bool epilogue);
// The attempt after `failed` failed; `algorithms`: how many algorithms the heuristic offered for
// failed's route (0 when it offered none, which is how a heuristic failure is reported).
GemmAttempt gemm_next_attempt(GemmAttempt failed, int algorithms);
// Whether the epilogue runs as a kernel of its own after the GEMM on this route.
bool gemm_epilogue_separate(GemmRoute route);
// For the log: "cuBLASLt algorithm 2 with the epilogue fused", "cublasGemmEx", …
std::string gemm_attempt_name(GemmAttempt attempt);

}  // namespace megatrain::cuda
