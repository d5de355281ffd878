#include "kernels/cpu/gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include "kernels/check.h"

namespace megatrain::cpu {

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const dnnl_status_t st =
      dnnl_sgemm(static_cast<char>(ta), static_cast<char>(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  MT_CHECK(st == dnnl_success, "dnnl_sgemm({}x{}x{}) failed with status {}", M, N, K, static_cast<int>(st));
}

}  // namespace megatrain::cpu
