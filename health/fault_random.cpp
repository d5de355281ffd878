#include "health/fault_random.h"

namespace megatrain {

RandomFaults::RandomFaults(const RandomFaultSpec& spec, int attempt)
    : spec_(spec), rng_(spec.seed * 1000003u + static_cast<uint64_t>(attempt)) {
  next_s_ = std::exponential_distribution<double>(1.0 / spec_.mtti_s)(rng_);
}

std::vector<Fault> RandomFaults::due(double elapsed_s, int64_t step, int world) {
  std::vector<Fault> out;
  while (elapsed_s >= next_s_) {
    next_s_ += std::exponential_distribution<double>(1.0 / spec_.mtti_s)(rng_);
    Fault f;
    f.kind = spec_.kinds[std::uniform_int_distribution<size_t>(0, spec_.kinds.size() - 1)(rng_)];
    f.rank = std::uniform_int_distribution<int>(0, world - 1)(rng_);
    f.first_step = f.last_step = step;
    f.attempt = -1;
    switch (f.kind) {
      case FaultKind::hang: f.detail = std::bernoulli_distribution(0.5)(rng_) ? "freeze" : "sigstop"; break;
      case FaultKind::nan: f.detail = "grad"; break;
      case FaultKind::slow:
        f.ms = 100;
        f.last_step = step + 19;
        break;
      case FaultKind::ckpt_crash: {
        static constexpr const char* kPhases[] = {"mid_shard_write", "after_shard_before_commit",
                                                  "after_commit_before_latest"};
        f.detail = kPhases[std::uniform_int_distribution<int>(0, 2)(rng_)];
        f.rank = 0;
        f.last_step = std::numeric_limits<int64_t>::max();
        break;
      }
      default: break;
    }
    out.push_back(f);
  }
  return out;
}

}  // namespace megatrain
