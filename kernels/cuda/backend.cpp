// Which DeviceBackend the ops on Device::cuda streams call (kernels/cuda/backend.h).
#include "kernels/cuda/backend.h"

namespace megatrain {
namespace {

DeviceBackend* chosen = nullptr;

}  // namespace

DeviceBackend& cuda_backend() {
  if (chosen != nullptr) return *chosen;
#ifdef MEGATRAIN_HAS_CUDA
  // Made once, on the first op on a CUDA stream, and kept for the life of the process.
  static const std::unique_ptr<DeviceBackend> production = cuda::make_backend();
  return *production;
#else
  throw Error("an op on a CUDA stream, but this build has no CUDA backend (reconfigure with -DMEGATRAIN_CUDA=ON "
              "where the CUDA toolkit is installed, or run on CPU streams)");
#endif
}

void set_cuda_backend(DeviceBackend* backend) { chosen = backend; }

}  // namespace megatrain
