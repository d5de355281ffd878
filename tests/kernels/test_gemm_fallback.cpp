// The fallback order of the linear-layer GEMMs (kernels/cuda/gemm_fallback.h), walked the way
// kernels/cuda/gemm.cu walks it: a simulated cuBLAS whose heuristic offers a given number of
// algorithms per route and where every attempt before a chosen one fails. Each case reads the
// attempts made, in order.
#include "kernels/cuda/gemm_fallback.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace megatrain::cuda {
namespace {

struct Simulated {
  int fused_algorithms = 0;  // what the heuristic offers with the epilogue fused
  int plain_algorithms = 0;  // … and without it
  int runs_at = -1;          // the index of the attempt that runs (-1: none does)
};

// The attempts made for one GEMM, named; "throws" when the walk ends with nothing run.
std::vector<std::string> walk(bool epilogue, const Simulated& cublas) {
  std::vector<std::string> made;
  GemmAttempt at = gemm_first_attempt(epilogue);
  for (int i = 0; at.route != GemmRoute::none; ++i) {
    made.push_back(gemm_attempt_name(at));
    if (i == cublas.runs_at) return made;
    if (i > 4 * kGemmAlgorithms) {
      made.push_back("no end");
      return made;
    }
    const int offered = at.route == GemmRoute::fused   ? cublas.fused_algorithms
                        : at.route == GemmRoute::plain ? cublas.plain_algorithms
                                                       : 1;
    at = gemm_next_attempt(at, offered);
  }
  made.push_back("throws");
  return made;
}

using Names = std::vector<std::string>;

TEST(GemmFallback, TheFirstOfferedAlgorithmWithTheEpilogueFusedRunsFirst) {
  EXPECT_EQ(walk(true, {3, 3, 0}), Names{"cuBLASLt algorithm 0 with the epilogue fused"});
  EXPECT_EQ(walk(false, {0, 3, 0}), Names{"cuBLASLt algorithm 0 without an epilogue"});
}

TEST(GemmFallback, ARefusedAlgorithmIsFollowedByTheNextOffered) {
  EXPECT_EQ(walk(true, {3, 3, 2}), (Names{"cuBLASLt algorithm 0 with the epilogue fused",
                                          "cuBLASLt algorithm 1 with the epilogue fused",
                                          "cuBLASLt algorithm 2 with the epilogue fused"}));
}

TEST(GemmFallback, AnEpilogueWithNoAlgorithmRunsTheGemmWithoutIt) {
  EXPECT_EQ(walk(true, {0, 2, 1}),
            (Names{"cuBLASLt algorithm 0 with the epilogue fused", "cuBLASLt algorithm 0 without an epilogue"}));
  EXPECT_TRUE(gemm_epilogue_separate(GemmRoute::plain));
  EXPECT_FALSE(gemm_epilogue_separate(GemmRoute::fused));
}

TEST(GemmFallback, EveryFusedAlgorithmRefusedThenEveryPlainOneThenCublasGemmEx) {
  EXPECT_EQ(walk(true, {2, 2, 4}), (Names{"cuBLASLt algorithm 0 with the epilogue fused",
                                          "cuBLASLt algorithm 1 with the epilogue fused",
                                          "cuBLASLt algorithm 0 without an epilogue",
                                          "cuBLASLt algorithm 1 without an epilogue", "cublasGemmEx"}));
  EXPECT_TRUE(gemm_epilogue_separate(GemmRoute::gemm_ex));
}

TEST(GemmFallback, NoCublasLtAlgorithmAtAllFallsBackToCublasGemmEx) {
  EXPECT_EQ(walk(false, {0, 0, 1}), (Names{"cuBLASLt algorithm 0 without an epilogue", "cublasGemmEx"}));
  EXPECT_EQ(walk(true, {0, 0, 2}), (Names{"cuBLASLt algorithm 0 with the epilogue fused",
                                          "cuBLASLt algorithm 0 without an epilogue", "cublasGemmEx"}));
}

TEST(GemmFallback, WhenEverythingFailsTheWalkEndsAfterTryingEachOnce) {
  const Names made = walk(true, {kGemmAlgorithms, kGemmAlgorithms, -1});
  ASSERT_EQ(made.size(), static_cast<size_t>(2 * kGemmAlgorithms + 2));
  EXPECT_EQ(made[made.size() - 2], "cublasGemmEx");
  EXPECT_EQ(made.back(), "throws");
}

TEST(GemmFallback, NoMoreAlgorithmsAreTriedThanTheHeuristicIsAskedFor) {
  const Names made = walk(false, {0, 3 * kGemmAlgorithms, -1});
  ASSERT_EQ(made.size(), static_cast<size_t>(kGemmAlgorithms + 2));
  EXPECT_EQ(made[kGemmAlgorithms - 1], fmt::format("cuBLASLt algorithm {} without an epilogue", kGemmAlgorithms - 1));
}

}  // namespace
}  // namespace megatrain::cuda
