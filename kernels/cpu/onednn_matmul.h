// oneDNN matmul primitives for GEMMs whose inputs are not float32: C (M × N, float32, row-major,
// leading dimension ldc) = α·op(A)·op(B) + β·C, A and B row-major with leading dimensions lda, ldb
// (as cpu::gemm), of element type `in`. Primitives are cached per shape, transposes, leading
// dimensions and scalars (a training step uses a handful), per thread.
// [Note: one wiring] The same code builds the float32 instance, which every CPU has: the tests
// check the strides, transposes, α and β through it, so the bfloat16 instance — used where this
// CPU's oneDNN has a bf16 matmul — differs from tested code only in the element type.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/cpu/gemm.h"

namespace megatrain::cpu {

enum class MatmulInput : uint8_t { f32, bf16 };

// Computes C and returns true; or returns false (computing nothing) when oneDNN has no
// implementation of this matmul for this CPU other than its slow reference one.
bool onednn_matmul(MatmulInput in, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
                   int64_t lda, const void* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The implementation oneDNN picks for a bf16 matmul on this CPU (its impl_info_str, e.g.
// "brg:avx512_core_amx"), or "" when it has none but the reference one.
std::string onednn_bf16_matmul_impl();

}  // namespace megatrain::cpu
