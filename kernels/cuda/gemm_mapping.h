// The linear layer's row-major GEMMs (kernels/ops.h: out = inp·weightᵀ, dinp = dout·weight,
// dweight += doutᵀ·inp, PyTorch layout) as the column-major problems cuBLASLt solves.
// A row-major (r, c) matrix with row stride c, read column-major, is its transpose: a (c × r)
// matrix with leading dimension c. So a row-major product Y = X·Z is solved as Yᵀ = Zᵀ·Xᵀ on the
// same memory, nothing copied, and each pass is a choice of which buffer is A, which is B, and
// which of them is transposed. Pure, so tests/kernels/test_gemm_mapping.cpp checks it on the CPU
// against a naive GEMM that reads the same description.
#pragma once
#include <cstdint>

namespace megatrain::cuda {

enum class GemmPass : uint8_t { forward, dinp, dweight };
enum class GemmOperand : uint8_t { inp, weight, dout };

// D (m × n, column-major, leading dimension ldd) = op(A)·op(B) + beta·D, with op(A) m × k and
// op(B) k × n; op(X) = Xᵀ when trans_x. A stored matrix has ld ≥ its rows: m (or k when
// transposed) for A, k (or n) for B.
// Epilogues, as cuBLASLt defines them: a bias (CUBLASLT_EPILOGUE_BIAS) has m entries, one per row
// of D; a bias gradient from B (BGRADB) has n entries, column j the sum over k of op(B)(·, j); an
// aux buffer (GELU pre-activation) has D's layout with leading dimension ldd.
struct ColumnMajorGemm {
  GemmOperand a, b;
  bool trans_a, trans_b;
  int64_t m, n, k;
  int64_t lda, ldb, ldd;
  float beta;  // 0: D =, 1: D += (the weight gradient accumulates over micro-batches)
};

// For inp (N, C), weight (OC, C), dout and out (N, OC), dinp (N, C), dweight (OC, C):
//   forward: D = out, m = OC, bias along m;   dinp: D = dinp, m = C;
//   dweight: D = dweight, n = OC, its bias gradient (BGRADB) is dbias.
ColumnMajorGemm gemm_mapping(GemmPass pass, int64_t N, int64_t C, int64_t OC);

}  // namespace megatrain::cuda
