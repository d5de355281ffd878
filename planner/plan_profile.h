// What the planner knows about a device and its links (`megatrain plan`): the peak and the share
// of it a training step reaches, memory and its bandwidth, and the bandwidth and latency of the
// links inside a node and between nodes. GPU profiles come from datasheets; the CPU profile is
// measured (`megatrain plan --measure`, under mpirun) and stored as a small TOML file.
// [Note: CPU ranks share cores] A CPU rank's compute speed is measured in CPU time ([Note: CPU-time
// clock], trainer/peak_flops.h): the speed of a rank that holds its cores, whatever else runs on the
// node. How many ranks hold cores at once is the layout's business, not the profile's: the cost
// model shares the node's `cores` among the ranks computing on it (planner/plan_cost.h). Measured
// in wall time, the profile would instead record the share its own measuring ranks got, which is
// right only for layouts whose ranks all compute all the time (data parallel), and, on a machine
// shared with other users, a share the scheduler hands out differently to ranks that block in
// communication (bench/RESULTS.md "Planner predictions").
#pragma once
#include <string>

#include "config/config.h"
#include "parallel/comm.h"

namespace megatrain {

struct DeviceProfile {
  std::string name;
  double peak_tflops = 0;      // per device, dense, in the precision the linear layers multiply
  double efficiency = 0;       // achieved share of the peak over a training step's model FLOPs
  double memory_gib = 0;       // per device
  double memory_gbps = 0;      // memory bandwidth (the optimizer's update is bound by it)
  double intra_gbps = 0;       // GB/s per device to devices of its node (NVLink; shared memory)
  double inter_gbps = 0;       // GB/s per device to other nodes (InfiniBand)
  double latency_us = 0;       // per message of a collective's step
  int devices_per_node = 1;
  double overlap = 0;          // share of the communication the trainer overlaps that compute hides
  int cores = 0;               // CPU: cores per node the ranks share (0: each device computes alone)
  int threads = 1;             // CPU: compute threads per rank (OpenMP), each taking a core
  // Where a planned run computes: a GPU profile's ranks on GPUs (train.device = "cuda": the config
  // rules, and what a stage holds, e.g. its activations' dtype, are a device run's), a CPU's on CPUs.
  Device compute() const { return cores == 0 ? Device::cuda : Device::cpu; }
};

// "h100" (SXM, bf16 dense 989 TFLOP/s, 80 GB, NVLink 450 GB/s, 8 per node), "a100" (SXM 80 GB,
// 312 TFLOP/s, NVLink 300 GB/s); the InfiniBand figure is 50 GB/s (400 Gb/s NDR) and 25 GB/s.
// Throws InputError naming --gpu for another name ("cpu" needs a measured profile).
DeviceProfile gpu_profile(const std::string& name);
// Applies --network "nvlink=450,ib=50" (GB/s per device; keys nvlink|intra and ib|inter) to `p`.
void apply_network(DeviceProfile& p, const std::string& spec);

// Measures this machine on `world` (collective; every rank gets the result): the peak of a square
// GEMM in c's train.precision (trainer/peak_flops.h) and the efficiency a training step of `c` reaches (each rank trains its own replica at
// tp = pp = dp = 1, a few steps after a warm-up, on c's data), both on all ranks at once in CPU time
// ([Note: CPU ranks share cores]); the node's online cores and the ranks' OpenMP threads; the
// bandwidth of a large copy; an all-reduce's bus bandwidth (1–8 MiB) and latency (8 bytes) over the
// world. memory_gib: the host's memory over the ranks.
DeviceProfile measure_cpu_profile(const Config& c, const Comm& world);

std::string profile_to_toml(const DeviceProfile& p);
// Reads a file written by profile_to_toml; InputError naming the file and the missing key.
DeviceProfile load_profile(const std::string& path);

}  // namespace megatrain
