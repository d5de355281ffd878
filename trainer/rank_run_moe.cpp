// RankRun's Mixture-of-Experts parts (trainer/rank_run.h): the routing statistics each step logs,
// and the auxiliary-loss-free router bias update (moe.aux_free_bias).
#include "trainer/rank_run.h"

#include "kernels/flat_buffer.h"
#include "kernels/ops.h"

namespace megatrain {

void RankRun::update_router_biases() {
  const MoeConfig& moe = cfg.model.moe;
  if (moe.aux_free_bias <= 0.0f) return;
  const FlatRange mine = zero.optimizer_range();
  std::vector<float> bias(static_cast<size_t>(moe.n_experts));
  for (Chunk& ch : chunks_)
    for (const MoeLayerStats& m : ch.stage->moe_stats()) {
      std::vector<int64_t> load = m.step_tokens;  // tp ranks route the same rows: summed over dp only
      if (dp > 1) dp_comm.all_reduce(load.data(), moe.n_experts).wait();
      const size_t i = layout.index_of("layers." + std::to_string(m.layer) + ".moe.router.bias");
      const FlatRange t{layout.offset(i), layout.offset(i) + moe.n_experts};
      std::fill(bias.begin(), bias.end(), 0.0f);
      moe_update_bias(bias.data(), load.data(), moe.n_experts, moe.aux_free_bias);  // the step of each bias
      // Added to the part of the bias this rank updates, in the memory of the run's stream.
      const int64_t lo = std::max(t.begin, mine.begin), hi = std::min(t.end, mine.end);
      if (lo >= hi) continue;
      const Tensor held = Tensor(zero.optimizer_params() + (lo - mine.begin), Shape{hi - lo}).on(stream.device);
      const FlatBuffer step(hi - lo, stream);
      copy_from_host(stream, step.part(0, hi - lo), bias.data() + (lo - t.begin));
      add_forward(stream, held, held, step.part(0, hi - lo));
    }
}

double RankRun::moe_dispatch_ms() const {
  double ms = 0.0;
  for (const Chunk& ch : chunks_) ms += ch.stage->moe_dispatch_ms();
  return ms;
}

std::vector<MoeLayerStats> RankRun::moe_stats() {
  std::vector<MoeLayerStats> all;
  for (int l = 0; l < cfg.model.n_layers; ++l)
    if (cfg.model.moe.is_moe_layer(l))
      all.push_back({l, std::vector<int64_t>(static_cast<size_t>(cfg.model.moe.n_experts)), {}});
  if (all.empty()) return all;
  // Every value of every layer in one sum over the world; tp ranks route the same rows, so only
  // tp rank 0 of each stage adds its own.
  const size_t E = static_cast<size_t>(cfg.model.moe.n_experts), per = E + 5;
  std::vector<double> sums(all.size() * per, 0.0);
  for (Chunk& ch : chunks_) {
    for (const MoeLayerStats& m : ch.stage->moe_stats()) {
      size_t i = 0;
      while (all[i].layer != m.layer) ++i;
      double* v = sums.data() + i * per;
      if (tp_comm.rank() == 0) {
        for (size_t e = 0; e < E; ++e) v[e] = static_cast<double>(m.tokens[e]);
        v[E] = static_cast<double>(m.dropped), v[E + 1] = static_cast<double>(m.assignments);
        v[E + 2] = m.aux, v[E + 3] = m.z, v[E + 4] = static_cast<double>(m.micro_batches);
      }
    }
    ch.stage->reset_moe_stats();
  }
  world.all_reduce(sums.data(), static_cast<int64_t>(sums.size())).wait();
  for (size_t i = 0; i < all.size(); ++i) {
    const double* v = sums.data() + i * per;
    for (size_t e = 0; e < E; ++e) all[i].tokens[e] = static_cast<int64_t>(v[e]);
    all[i].dropped = static_cast<int64_t>(v[E]), all[i].assignments = static_cast<int64_t>(v[E + 1]);
    all[i].aux = v[E + 2], all[i].z = v[E + 3], all[i].micro_batches = static_cast<int64_t>(v[E + 4]);
  }
  return all;
}

}  // namespace megatrain
