#include "trainer/replica_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "checkpoint/checkpoint_shard.h"
#include "parallel/comm_gather.h"

namespace megatrain {

ReplicaCheck::ReplicaCheck(const Config& cfg, RankRun& run, MemorySnapshots& snapshots)
    : run_(run), snapshots_(snapshots), interval_(cfg.health.replica_check_interval) {
  if (interval_ <= 0 || run_.groups.dp_cp().size() == 1) {
    interval_ = 0;
    return;
  }
  const ZeroState& dense = run_.optim_groups().front().zero();
  const FlatRange held = dense.held_params_range();
  if (held.begin != 0 || held.end != dense.total()) {
    if (run_.world.rank() == 0)
      spdlog::info("replica check off: at ZeRO stage {} with {} parameters the data-parallel ranks hold different "
                   "parts of them", cfg.parallel.zero_stage, precision_name(cfg.train.precision));
    interval_ = 0;
    return;
  }
  dp_world_ranks_ = all_gather_value<int32_t>(run_.groups.dp_cp(), run_.world.rank());
}

void ReplicaCheck::updated(const StepOutcome& out) {
  const int64_t step = out.step;
  if (interval_ == 0 || step % interval_ != 0) return;
  const ParamLayout& layout = run_.layout;
  const size_t n = layout.size();
  const auto p = static_cast<size_t>(run_.groups.dp_cp().size());
  std::vector<int64_t> mine(n), all(n * p);
  const float* base = run_.held_params_host().data;  // held from flat element 0 (the constructor)
  for (size_t i = 0; i < n; ++i)
    mine[i] = ckpt::crc_floats(base + layout.offset(i), layout.local_shape(i).numel());
  run_.groups.dp_cp().all_gather(all.data(), mine.data(), std::vector<int64_t>(p, static_cast<int64_t>(n))).wait();
  std::vector<int> odd_ranks;
  std::vector<std::string> odd_params;
  for (size_t i = 0; i < n; ++i) {
    std::map<int64_t, size_t> votes;
    for (size_t r = 0; r < p; ++r) ++votes[all[r * n + i]];
    if (votes.size() == 1) continue;
    // The odd ones out differ from the majority; without one (two replicas, a tie) all are named.
    size_t most = 0, with_most = 0;
    int64_t majority = 0;
    for (const auto& [h, c] : votes) {
      if (c > most) most = c, majority = h, with_most = 1;
      else if (c == most) ++with_most;
    }
    odd_params.push_back(layout.spec(i).name);
    for (size_t r = 0; r < p; ++r)
      if ((with_most > 1 || all[r * n + i] != majority) &&
          std::find(odd_ranks.begin(), odd_ranks.end(), dp_world_ranks_[r]) == odd_ranks.end())
        odd_ranks.push_back(dp_world_ranks_[r]);
  }
  int64_t any = odd_params.empty() ? 0 : 1;
  run_.world.all_reduce(&any, 1, ReduceOp::max).wait();
  if (any == 0) return;
  std::sort(odd_ranks.begin(), odd_ranks.end());
  snapshots_.discard("REPLICA_MISMATCH: taken after the corruption began, a restart must load the storage checkpoint");
  throw ReplicaMismatch(
      odd_params.empty()
          ? fmt::format("REPLICA_MISMATCH step={} in another data-parallel group (its ranks name the replica)", step)
          : fmt::format("REPLICA_MISMATCH step={} ranks=[{}] params=[{}]: data-parallel replicas that must be "
                        "identical differ (a hardware fault or a missed update); restart from the last checkpoint and "
                        "check those ranks' hosts",
                        step, fmt::join(odd_ranks, ","), fmt::join(odd_params, ",")));
}

}  // namespace megatrain
