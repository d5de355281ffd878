#include "kernels/cuda/cublas_lib.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <string>

#include "kernels/check.h"

namespace megatrain {
namespace {

// The header's cublasGemmEx has CublasGemmEx's type (unevaluated: no reference to the library).
static_assert(sizeof(static_cast<CublasGemmEx>(&cublasGemmEx)) > 0);

void* open_library(const std::string& name) {
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr)
    throw Error(fmt::format("cannot open {} for the CUDA backend's GEMMs: {} (install the CUDA toolkit's cuBLAS, or "
                            "put its folder in LD_LIBRARY_PATH)",
                            name, dlerror()));
  return handle;
}

template <class F>
void resolve(F& to, void* library, const char* symbol, const std::string& library_name) {
  to = reinterpret_cast<F>(dlsym(library, symbol));
  if (to == nullptr)
    throw Error(fmt::format("{} has no {}: {} (a cuBLAS older than the toolkit megatrain was built with?)",
                            library_name, symbol, dlerror()));
}

CublasLib load() {
  const std::string lt_name = fmt::format("libcublasLt.so.{}", CUBLAS_VER_MAJOR);
  const std::string blas_name = fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR);
  void* const lt = open_library(lt_name);
  void* const blas = open_library(blas_name);
  CublasLib f{};
  const auto from_lt = [&](auto& to, const char* symbol) { resolve(to, lt, symbol, lt_name); };
  const auto from_blas = [&](auto& to, const char* symbol) { resolve(to, blas, symbol, blas_name); };
  from_lt(f.LtCreate, "cublasLtCreate");
  from_lt(f.LtDestroy, "cublasLtDestroy");
  from_lt(f.LtGetStatusString, "cublasLtGetStatusString");
  from_lt(f.LtMatmul, "cublasLtMatmul");
  from_lt(f.LtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  from_lt(f.LtMatmulDescCreate, "cublasLtMatmulDescCreate");
  from_lt(f.LtMatmulDescDestroy, "cublasLtMatmulDescDestroy");
  from_lt(f.LtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  from_lt(f.LtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  from_lt(f.LtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  from_lt(f.LtMatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  from_lt(f.LtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  from_lt(f.LtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  from_blas(f.Create, "cublasCreate_v2");
  from_blas(f.Destroy, "cublasDestroy_v2");
  from_blas(f.GemmEx, "cublasGemmEx");
  from_blas(f.GetStatusString, "cublasGetStatusString");
  from_blas(f.SetStream, "cublasSetStream_v2");
  from_blas(f.SetWorkspace, "cublasSetWorkspace_v2");
  return f;
}

}  // namespace

const CublasLib& cublas_lib() {
  static const CublasLib lib = load();  // a throw leaves it unset: the next call tries again
  return lib;
}

}  // namespace megatrain
