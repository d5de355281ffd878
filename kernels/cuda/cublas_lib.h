// The cuBLAS and cuBLASLt entry points the CUDA backend calls (kernels/cuda/gemm.cu, gemm_plan.cpp),
// opened with dlopen at the first GEMM instead of linked: libcublasLt's half a million relocations
// cost every process 60-70 ms at its start, CPU runs that never touch a GPU included (8 ranks on
// 2 cores: 0.3 s of each launch). Each member has the type of the function it names.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

namespace megatrain {

// cublasGemmEx taking a cublasComputeType_t (cublas_api.h also has an inline overload taking a
// cudaDataType).
using CublasGemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                        const void*, const void*, cudaDataType, int, const void*, cudaDataType, int,
                                        const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

struct CublasLib {
  decltype(&cublasLtCreate) LtCreate;
  decltype(&cublasLtDestroy) LtDestroy;
  decltype(&cublasLtGetStatusString) LtGetStatusString;
  decltype(&cublasLtMatmul) LtMatmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) LtMatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmulDescCreate) LtMatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) LtMatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) LtMatmulDescSetAttribute;
  decltype(&cublasLtMatmulPreferenceCreate) LtMatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) LtMatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) LtMatmulPreferenceSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) LtMatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) LtMatrixLayoutDestroy;
  decltype(&cublasCreate_v2) Create;
  decltype(&cublasDestroy_v2) Destroy;
  CublasGemmEx GemmEx;
  decltype(&cublasGetStatusString) GetStatusString;
  decltype(&cublasSetStream_v2) SetStream;
  decltype(&cublasSetWorkspace_v2) SetWorkspace;
};

// Opens libcublasLt.so.N and libcublas.so.N (N: the toolkit's cuBLAS major version) once, from any
// thread; an Error naming the library or function and dlerror()'s reason when one is missing.
const CublasLib& cublas_lib();

}  // namespace megatrain
