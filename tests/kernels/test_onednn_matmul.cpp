// kernels/cpu/onednn_matmul.h: the float32 instance — which every CPU has, and which shares all of
// its wiring with the bfloat16 one ([Note: one wiring]) — against a double-precision product within
// the float32 accumulation bound γ(K + 2)·(|α|·Σ|a·b| + |β|·|c|), for every transpose, odd sizes,
// leading dimensions larger than the rows, α ≠ 1 and β ∈ {0, 1, 0.5}, calls repeated (the
// primitive cache). The bfloat16 instance is checked the same way where this CPU's oneDNN has a
// bf16 matmul, and otherwise must decline (return false, computing nothing).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/onednn_matmul.h"
#include "kernels/half.h"
#include "kernels/rng.h"

namespace megatrain {
namespace {

using cpu::MatmulInput;
using cpu::Trans;

// Runs onednn_matmul(in, …) on random operands of every shape; checks the result when it ran.
// Returns how many calls ran.
int check_all_shapes(MatmulInput in) {
  const RngKey k{7, static_cast<uint32_t>(RngPurpose::test), 0, 0};
  uint64_t draw = 0;
  const double u = std::ldexp(1.0, -24);
  int ran = 0;
  for (Trans ta : {Trans::no, Trans::yes})
    for (Trans tb : {Trans::no, Trans::yes})
      for (int64_t M : {1, 7, 33})
        for (int64_t N : {1, 9, 65})
          for (int64_t K : {1, 5, 130})
            for (float beta : {0.0f, 1.0f, 0.5f}) {
              const int64_t lda = (ta == Trans::no ? K : M) + 3, ldb = (tb == Trans::no ? N : K) + 2, ldc = N + 1;
              std::vector<float> A(static_cast<size_t>((ta == Trans::no ? M : K) * lda)),
                  B(static_cast<size_t>((tb == Trans::no ? K : N) * ldb)), C(static_cast<size_t>(M * ldc));
              for (auto* v : {&A, &B, &C})
                for (float& x : *v) x = rng_normal(k, draw++);
              std::vector<uint16_t> A16(A.size()), B16(B.size());
              if (in == MatmulInput::bf16) {  // the operands become their bf16 values
                for (size_t i = 0; i < A.size(); ++i) A[i] = bf16_to_float(A16[i] = float_to_bf16(A[i]));
                for (size_t i = 0; i < B.size(); ++i) B[i] = bf16_to_float(B16[i] = float_to_bf16(B[i]));
              }
              const void* a = in == MatmulInput::bf16 ? static_cast<const void*>(A16.data()) : A.data();
              const void* b = in == MatmulInput::bf16 ? static_cast<const void*>(B16.data()) : B.data();
              const std::vector<float> C0 = C;
              const float alpha = 1.5f;
              if (!cpu::onednn_matmul(in, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C.data(), ldc)) {
                EXPECT_EQ(C, C0) << "declined, yet wrote C";
                continue;
              }
              ++ran;
              const double gamma = (K + 2) * u / (1 - (K + 2) * u);
              for (int64_t i = 0; i < M; ++i)
                for (int64_t j = 0; j < N; ++j) {
                  double exact = 0.0, mag = 0.0;
                  for (int64_t p = 0; p < K; ++p) {
                    const double x = A[static_cast<size_t>(ta == Trans::no ? i * lda + p : p * lda + i)];
                    const double y = B[static_cast<size_t>(tb == Trans::no ? p * ldb + j : j * ldb + p)];
                    exact += x * y;
                    mag += std::fabs(x * y);
                  }
                  const double c0 = C0[static_cast<size_t>(i * ldc + j)];
                  const double want = alpha * exact + beta * c0;
                  const double bound = gamma * (alpha * mag + beta * std::fabs(c0));
                  EXPECT_LE(std::fabs(C[static_cast<size_t>(i * ldc + j)] - want), bound)
                      << "M " << M << " N " << N << " K " << K << " ta " << static_cast<char>(ta) << " tb "
                      << static_cast<char>(tb) << " beta " << beta << " at " << i << "," << j;
                }
              // Outside the M × N block of C (the padding columns) nothing changed.
              for (int64_t i = 0; i < M; ++i)
                for (int64_t j = N; j < ldc; ++j)
                  EXPECT_EQ(C[static_cast<size_t>(i * ldc + j)], C0[static_cast<size_t>(i * ldc + j)]);
            }
  return ran;
}

TEST(OnednnMatmul, Float32WiringIsTheProductForEveryTransposeStrideAndScalar) {
  EXPECT_EQ(check_all_shapes(MatmulInput::f32), 2 * 2 * 3 * 3 * 3 * 3);
  EXPECT_EQ(check_all_shapes(MatmulInput::f32), 2 * 2 * 3 * 3 * 3 * 3);  // again: from the primitive cache
}

TEST(OnednnMatmul, Bf16RunsWhereTheCpuHasItAndDeclinesElsewhere) {
  const bool native = !cpu::onednn_bf16_matmul_impl().empty();
  EXPECT_EQ(check_all_shapes(MatmulInput::bf16), native ? 2 * 2 * 3 * 3 * 3 * 3 : 0);
  RecordProperty("bf16_matmul", native ? cpu::onednn_bf16_matmul_impl() : "none on this CPU");
}

}  // namespace
}  // namespace megatrain
