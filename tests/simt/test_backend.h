// The device backend the device tests run their Device::cuda side on, chosen by what the test
// binary links: the host SIMT emulation (test_backend_simt.cpp: the unit-labelled binaries, which
// run everywhere) or the GPU's production backend (tests/cuda/test_backend_gpu.cpp: the
// cuda-labelled binary, run on a machine with a GPU). The tests are the same source either way.
#pragma once
#include <memory>

#include "kernels/cuda/backend.h"

namespace megatrain::test {

std::unique_ptr<DeviceBackend> make_test_backend();

}  // namespace megatrain::test
