// The self-check before a (re)start (docs/robustness.md R06; MegaScale §4.3): short, bounded tests
// of every rank and link, so a bad host is found before it costs a training attempt. Collective
// over `world`; every rank gets the same report.
//   loopback     each rank sends 8 MiB to itself and checks every byte
//   pairs        each link of the rank ring (r with r + 1) alone: latency and 4 MiB bandwidth; a pair
//                under a third of the fastest pair of its kind (inter-host or not) is slow, and the
//                hosts that explain the slow pairs fail (health/link_probe.h)
//   all_reduce   exact sums (integers in float32) against the analytic value, and bus bandwidth
//   all_to_all   every block where it belongs
//   gemm         each rank in turn (no contention) times a 512³ float32 GEMM; a rank under half the
//                median speed fails (score = its speed ÷ the median)
//   storage      4 MiB written to the checkpoint folder, fsynced, read back and compared; a failure
//                names the path and the system's reason
//   memory       the host's available memory, against a floor
// MEGATRAIN_FAULT selfcheck_slow:rank=R:factor=F makes rank R's GEMM F times slower.
#pragma once
#include <string>
#include <vector>

#include "parallel/comm.h"

namespace megatrain {

struct SelfCheckOptions {
  std::string storage_dir;  // "" = the storage probe is skipped
  double min_free_mb = 256.0;
};

struct SelfCheckResult {
  std::string name;
  bool pass = true;
  double seconds = 0.0;
  std::string detail;             // what was measured, or why it failed
  std::vector<int> failing_ranks;
};

struct SelfCheckReport {
  std::vector<SelfCheckResult> checks;
  std::vector<std::string> hosts;  // per rank
  std::vector<int> failing_ranks;  // union over the checks
  std::vector<std::string> failing_hosts;
  double seconds = 0.0;
  bool pass() const { return failing_ranks.empty(); }
  std::string json() const;
};

SelfCheckReport run_selfcheck(const Comm& world, const SelfCheckOptions& options);

}  // namespace megatrain
