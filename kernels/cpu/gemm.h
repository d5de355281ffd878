// Single-precision GEMM for the CPU kernels, row-major: C = α·op(A)·op(B) + β·C.
// Backed by oneDNN's dnnl_sgemm: measured fastest of Debian's OpenBLAS, BLIS and oneDNN on the
// reference machine, and it picks AVX-512 kernels from CPUID without any environment variable
// (bench/RESULTS.md). Called inside an OpenMP region it runs on the calling thread.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/device.h"

namespace megatrain::cpu {

enum class Trans : char { no = 'N', yes = 'T' };

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The same with A and B in bfloat16 (kernels/half.h) and C in float32: every product of two
// bfloat16 values is exact in float32, and the sums are float32, so the result is the float32 GEMM
// of the bfloat16 values. Through oneDNN's bf16 matmul where this CPU has one
// (kernels/cpu/onednn_matmul.h; AVX512-BF16 or AMX); else by conversion: A and B are widened into
// float32 scratch (as stored, lda and ldb kept) and multiplied by gemm().
void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
               const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Whether gemm_bf16 runs natively (oneDNN's bf16 matmul) on this CPU; and the start-up log's
// phrase for how the 16-bit GEMMs of precision p run.
bool native_bf16_gemm();
std::string half_gemm_path(Precision p);

}  // namespace megatrain::cpu
