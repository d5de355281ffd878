// The DeviceBackend of the tests (kernels/cuda/backend.h): the CUDA kernels' own source under the
// host SIMT emulation (cuda_simt::KernelBackend, the production mapping of op entries onto
// launchers), with "device" memory in host memory through the production CachingAllocator and
// synchronous streams. GEMMs run on the CPU GEMM: cuBLASLt cannot be emulated (its row-major
// mapping is tested by GemmMapping.*), so here the GEMM entries check only ops.cpp's mapping.
// Set it with set_cuda_backend() and ops on Device::cuda streams run on the CPU through the kernels.
#pragma once
#include <memory>

#include "kernels/cuda/backend.h"

namespace megatrain::test {

std::unique_ptr<DeviceBackend> make_simt_backend();

}  // namespace megatrain::test
