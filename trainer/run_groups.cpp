#include "trainer/run_groups.h"

#include <fmt/format.h>

#include "kernels/check.h"
#include "kernels/cuda/backend.h"
#ifdef MEGATRAIN_HAS_CUDA
#include "parallel/comm_nccl.h"
#endif

namespace megatrain {
namespace {

ParallelDims parallel_dims(const Config& c) {
  const ParallelConfig& p = c.parallel;
  return ParallelDims{.tp = p.tp, .cp = p.cp, .ep = p.ep, .dp = p.dp, .pp = p.pp};
}

// The device backend of a run on a device, its attention kernels chosen (train.attention_backend),
// or an InputError naming the config key and the fix.
DeviceBackend& run_backend(const Config& c) {
  DeviceBackend* backend = nullptr;
  try {
    backend = &cuda_backend();
  } catch (const Error& e) {
    throw InputError(fmt::format("{}: train.device = \"cuda\", but {}; set train.device = \"cpu\" to train on the "
                                 "CPU",
                                 c.source, e.what()));
  }
  try {
    backend->set_attention(c.train.attention_backend);
  } catch (const Error& e) {
    throw InputError(fmt::format("{}: train.attention_backend = \"cudnn\": {}", c.source, e.what()));
  }
  return *backend;
}

}  // namespace

Stream run_stream(const Config& c) { return Stream{c.train.device, nullptr, c.train.precision}; }

ProcessGroups process_groups(const Config& c, const Comm& world) {
  if (c.train.device == Device::cpu || run_backend(c).host_addressable()) return ProcessGroups(world, parallel_dims(c));
#ifdef MEGATRAIN_HAS_CUDA
  return nccl_process_groups(world, parallel_dims(c));
#else
  throw Error(
      "train.device = \"cuda\" on a GPU backend in a build without NCCL (reconfigure with -DMEGATRAIN_CUDA=ON)");
#endif
}

}  // namespace megatrain
