#include "kernels/cpu/gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/check.h"

namespace megatrain::cpu {

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const dnnl_status_t st =
      dnnl_sgemm(static_cast<char>(ta), static_cast<char>(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  MT_CHECK(st == dnnl_success, "dnnl_sgemm({}x{}x{}) failed with status {}", M, N, K, static_cast<int>(st));
}

bool native_bf16_gemm() {
  static const bool native = !onednn_bf16_matmul_impl().empty();
  return native;
}

std::string half_gemm_path(Precision p) {
  if (p == Precision::bf16 && native_bf16_gemm())
    return fmt::format("oneDNN's bf16 matmul ({})", onednn_bf16_matmul_impl());
  return fmt::format("{} roundings multiplied by the float32 GEMM ({})", precision_name(p),
                     p == Precision::bf16 ? "oneDNN has no bf16 matmul for this CPU" : "fp16 GEMMs always convert on CPUs");
}

void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
               const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (onednn_matmul(MatmulInput::bf16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
  // op(A) is M × K: stored as M rows of K (no transpose) or K rows of M, lda apart; likewise op(B).
  const auto stored = [](int64_t rows, int64_t cols, int64_t ld) { return rows == 0 ? 0 : (rows - 1) * ld + cols; };
  const int64_t a_size = ta == Trans::no ? stored(M, K, lda) : stored(K, M, lda);
  const int64_t b_size = tb == Trans::no ? stored(K, N, ldb) : stored(N, K, ldb);
  thread_local std::vector<float> a, b;  // grow only; reused call to call
  if (static_cast<int64_t>(a.size()) < a_size) a.resize(static_cast<size_t>(a_size));
  if (static_cast<int64_t>(b.size()) < b_size) b.resize(static_cast<size_t>(b_size));
  half_to_f32(Precision::bf16, a.data(), A, a_size);
  half_to_f32(Precision::bf16, b.data(), B, b_size);
  gemm(ta, tb, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, C, ldc);
}

}  // namespace megatrain::cpu
