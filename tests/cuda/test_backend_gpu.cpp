// The device tests' backend in the cuda-labelled binary: the production CUDA backend on this
// rank's GPU (kernels/cuda/backend_cuda.cpp: the kernels built by nvcc, cuBLASLt GEMMs, the
// caching allocator over cudaMalloc).
#include "tests/simt/test_backend.h"

namespace megatrain::test {

std::unique_ptr<DeviceBackend> make_test_backend() { return cuda::make_backend(); }

}  // namespace megatrain::test
