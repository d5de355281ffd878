// GPU test of the NCCL backend (parallel/comm_nccl.h; label cuda, mpirun -np 2, one GPU per rank):
// device all-reduces (float and Bf16 sums) and an uneven all-gather ordered with a compute stream
// by the event handshake, a host exchange routed to MPI on the same communicator, and a host wait.
// Without a CUDA device, or with fewer devices than ranks on the node, every test skips saying so.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/half.h"
#include "parallel/comm.h"
#include "parallel/comm_nccl.h"
#include "parallel/groups.h"
#include "parallel/launch_env.h"

namespace megatrain {
namespace {

// Skips unless this node has a CUDA device for each of its ranks.
#define SKIP_WITHOUT_DEVICES()                                                                                   \
  do {                                                                                                           \
    int devices = 0;                                                                                             \
    const cudaError_t rc = cudaGetDeviceCount(&devices);                                                         \
    if (rc != cudaSuccess || devices == 0)                                                                       \
      GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount reports none (" << cudaGetErrorString(rc)              \
                   << "); this test needs one GPU per rank";                                                     \
    if (devices < local_size_from_env())                                                                         \
      GTEST_SKIP() << "no CUDA device for every rank: " << devices << " device(s) for " << local_size_from_env() \
                   << " ranks on this node";                                                                     \
  } while (0)

void ok(cudaError_t rc, const char* what) { ASSERT_EQ(rc, cudaSuccess) << what << ": " << cudaGetErrorString(rc); }

// A device buffer of `n` elements of T, freed with the object.
template <class T>
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) { cudaMalloc(&ptr, n * sizeof(T)); }
  ~DeviceBuffer() { cudaFree(ptr); }
  T* ptr = nullptr;
};

TEST(NcclCuda, CollectivesOrderedWithTheComputeStream) {
  SKIP_WITHOUT_DEVICES();
  const Comm mpi_world = Comm::world();
  const int p = mpi_world.size(), rank = mpi_world.rank();
  const Comm world = make_nccl_world(mpi_world);
  cudaStream_t compute = nullptr;
  ok(cudaStreamCreate(&compute), "cudaStreamCreate");
  world.set_stream(Stream{Device::cuda, compute});
  const ProcessGroups groups(world, ParallelDims{.dp = p});  // the splits inherit the stream

  // float sum: element i of rank r is r + 1 + i.
  constexpr size_t n = 1000;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(rank + 1) + static_cast<float>(i);
  DeviceBuffer<float> dev(n);
  ok(cudaMemcpyAsync(dev.ptr, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, compute), "copy in");
  groups.dp().all_reduce(dev.ptr, n).wait();  // the compute stream waits for the sum
  ok(cudaMemcpyAsync(host.data(), dev.ptr, n * sizeof(float), cudaMemcpyDeviceToHost, compute), "copy out");
  ok(cudaStreamSynchronize(compute), "synchronize");
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(host[i], static_cast<float>(p * (p + 1) / 2) + static_cast<float>(p) * static_cast<float>(i)) << i;

  // Bf16 sum of ones, waited for on the host.
  std::vector<Bf16> ones(64, Bf16{float_to_bf16(1.0f)});
  DeviceBuffer<Bf16> dev16(ones.size());
  ok(cudaMemcpyAsync(dev16.ptr, ones.data(), ones.size() * sizeof(Bf16), cudaMemcpyHostToDevice, compute), "copy in");
  const Work w = world.all_reduce(dev16.ptr, static_cast<int64_t>(ones.size()));
  w.wait(WaitMode::host);
  EXPECT_TRUE(w.done());
  ok(cudaMemcpy(ones.data(), dev16.ptr, ones.size() * sizeof(Bf16), cudaMemcpyDeviceToHost), "copy out");
  for (const Bf16& v : ones) ASSERT_EQ(bf16_to_float(v.bits), static_cast<float>(p));

  // Uneven all-gather: rank j contributes j + 1 copies of j.
  std::vector<int64_t> counts;
  for (int j = 0; j < p; ++j) counts.push_back(j + 1);
  const int64_t total = p * (p + 1) / 2;
  std::vector<float> mine(static_cast<size_t>(rank + 1), static_cast<float>(rank)), gathered(static_cast<size_t>(total));
  DeviceBuffer<float> in(mine.size()), out(gathered.size());
  ok(cudaMemcpyAsync(in.ptr, mine.data(), mine.size() * sizeof(float), cudaMemcpyHostToDevice, compute), "copy in");
  groups.dp().all_gather(out.ptr, in.ptr, counts).wait();
  ok(cudaMemcpyAsync(gathered.data(), out.ptr, gathered.size() * sizeof(float), cudaMemcpyDeviceToHost, compute),
     "copy out");
  ok(cudaStreamSynchronize(compute), "synchronize");
  size_t at = 0;
  for (int j = 0; j < p; ++j)
    for (int k = 0; k <= j; ++k) ASSERT_EQ(gathered[at++], static_cast<float>(j)) << "part " << j;

  // A host value on the NCCL communicator goes to its MPI communicator.
  double seconds = 1.5;
  world.all_reduce(&seconds, 1, ReduceOp::max).wait();
  EXPECT_EQ(seconds, 1.5);
  EXPECT_GE(world.stats().calls, 4);
  ok(cudaStreamDestroy(compute), "cudaStreamDestroy");
}

}  // namespace
}  // namespace megatrain
