// megatrain_simt: the megatrain binary (cli/main.cpp) with the ops of Device::cuda streams on
// the host SIMT emulation (backend_simt.h) instead of a GPU, so that the end-to-end tests run
// train.device = "cuda" — the stages, ZeRO, the optimizer, the pipeline and the checkpoints on
// device memory — on a machine without one. The backend is set before main() runs.
#include "kernels/cuda/backend.h"
#include "tests/simt/backend_simt.h"

namespace {

const bool emulated_device = [] {
  static const std::unique_ptr<megatrain::DeviceBackend> backend = megatrain::test::make_simt_backend();
  megatrain::set_cuda_backend(backend.get());
  return true;
}();

}  // namespace
