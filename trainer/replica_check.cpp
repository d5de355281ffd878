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
  if (interval_ <= 0) return;
  std::vector<std::string> said;
  for (size_t k = 0; k < run_.optim_groups().size(); ++k) {
    const OptimGroup& g = run_.optim_groups()[k];
    const char* what = g.spec().experts ? "the experts" : "the dense parameters";
    const Comm& dp = g.zero().dp();
    const FlatRange held = g.zero().held_params_range();
    if (dp.size() == 1) {
      said.push_back(fmt::format("{} not compared: no other rank holds them", what));
    } else if (held.begin != 0 || held.end != g.zero().total()) {
      said.push_back(fmt::format("{} not compared: at ZeRO stage {} with {} parameters their replicas hold "
                                 "different parts of them",
                                 what, cfg.parallel.zero_stage, precision_name(cfg.train.precision)));
    } else {
      Compared c{k, {}, all_gather_value<int32_t>(dp, run_.world().rank())};
      const FlatRange in_layout = held.shifted(g.spec().begin);
      for (size_t i = 0; i < run_.layout().size(); ++i)
        if (run_.layout().offset(i) >= in_layout.begin && run_.layout().offset(i) < in_layout.end) c.tensors.push_back(i);
      said.push_back(fmt::format("{} compared over {} replicas", what, dp.size()));
      compared_.push_back(std::move(c));
    }
  }
  if (run_.world().rank() == 0)
    spdlog::info("replica check every {} steps: {}", interval_, fmt::join(said, "; "));
  if (compared_.empty()) interval_ = 0;
}

void ReplicaCheck::compare(const Compared& c, std::vector<int>& odd_ranks, std::vector<std::string>& odd_params) {
  const ParamLayout& layout = run_.layout();
  const Comm& dp = run_.optim_groups()[c.group].zero().dp();
  const size_t n = c.tensors.size();
  const auto p = static_cast<size_t>(dp.size());
  std::vector<int64_t> mine(n), all(n * p);
  const FlatSlice held = run_.held_params_host(c.group);  // the group's whole range (the constructor)
  for (size_t j = 0; j < n; ++j) {
    const size_t i = c.tensors[j];
    mine[j] = ckpt::crc_floats(held.data + (layout.offset(i) - held.begin), layout.local_shape(i).numel());
  }
  dp.all_gather(all.data(), mine.data(), std::vector<int64_t>(p, static_cast<int64_t>(n))).wait();
  for (size_t j = 0; j < n; ++j) {
    std::map<int64_t, size_t> votes;
    for (size_t r = 0; r < p; ++r) ++votes[all[r * n + j]];
    if (votes.size() == 1) continue;
    // The odd ones out differ from the majority; without one (two replicas, a tie) all are named.
    size_t most = 0, with_most = 0;
    int64_t majority = 0;
    for (const auto& [h, count] : votes) {
      if (count > most) most = count, majority = h, with_most = 1;
      else if (count == most) ++with_most;
    }
    odd_params.push_back(layout.spec(c.tensors[j]).name);
    for (size_t r = 0; r < p; ++r)
      if ((with_most > 1 || all[r * n + j] != majority) &&
          std::find(odd_ranks.begin(), odd_ranks.end(), c.world_ranks[r]) == odd_ranks.end())
        odd_ranks.push_back(c.world_ranks[r]);
  }
}

void ReplicaCheck::updated(const StepOutcome& out) {
  const int64_t step = out.step;
  if (interval_ == 0 || step % interval_ != 0) return;
  std::vector<int> odd_ranks;
  std::vector<std::string> odd_params;
  for (const Compared& c : compared_) compare(c, odd_ranks, odd_params);
  int64_t any = odd_params.empty() ? 0 : 1;
  run_.world().all_reduce(&any, 1, ReduceOp::max).wait();
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
