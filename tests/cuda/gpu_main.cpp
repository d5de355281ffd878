// main() of the cuda-labelled test binary: runs the tests when the machine has a GPU, and
// otherwise exits 77 (ctest's SKIP_RETURN_CODE) saying why, so that a machine without one reports
// the test as skipped, never as passed.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("skipped: no CUDA device (cudaGetDeviceCount: %s, %d devices); these tests run the CUDA "
                "backend on a GPU against the CPU backend (bench/gpu/device_check.sh runs them there)\n",
                err == cudaSuccess ? "no error" : cudaGetErrorString(err), devices);
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
