// The random mode of MEGATRAIN_FAULT, for chaos soaks (docs/robustness.md R25):
//
//   random:seed=S:mtti_s=T:kinds=kill,hang,exc,slow,ckpt_crash,nan[:attempt=N|*]
//
// Faults arrive as a Poisson process with mean time T seconds between them, counted from the start
// of training in each launch; each takes a kind from `kinds` and a rank (ckpt_crash: rank 0, the
// one that commits) at random. A fault due at a step start acts from that step: kill (SIGKILL),
// hang (a frozen rank, half of them stopped at the step's start — how=sigstop — and half inside the
// step's first collective — how=freeze), exc, nan (a NaN gradient), slow (100 ms for 20 steps),
// ckpt_crash (at the next save, in a random phase). The draws depend on S and the launch number
// only, so every rank draws the same faults, and a rerun of the soak draws them again. Random mode
// takes attempt=* by default: a restarted launch draws new faults.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "health/fault_plan.h"

namespace megatrain {

struct RandomFaultSpec {
  uint64_t seed = 0;
  double mtti_s = 0.0;
  std::vector<FaultKind> kinds;
};

class RandomFaults {
 public:
  RandomFaults(const RandomFaultSpec& spec, int attempt);
  // The faults due by `elapsed_s` seconds of training, made concrete at `step` for `world` ranks.
  std::vector<Fault> due(double elapsed_s, int64_t step, int world);

 private:
  RandomFaultSpec spec_;
  std::mt19937_64 rng_;
  double next_s_;
};

}  // namespace megatrain
