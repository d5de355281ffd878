#include "trainer/moe_totals.h"

namespace megatrain {

std::vector<MoeLayerStats> moe_totals(const ModelConfig& cfg, const std::vector<MoeStats*>& stages, bool own,
                                      const Comm& world) {
  std::vector<MoeLayerStats> all;
  for (int l = 0; l < cfg.n_layers; ++l)
    if (cfg.moe.is_moe_layer(l)) all.push_back({l, std::vector<int64_t>(static_cast<size_t>(cfg.moe.n_experts)), {}});
  if (all.empty()) return all;
  // Every value of every layer in one sum over the world.
  const size_t E = static_cast<size_t>(cfg.moe.n_experts), per = E + 5;
  std::vector<double> sums(all.size() * per, 0.0);
  for (MoeStats* stage : stages) {
    for (const MoeLayerStats& m : stage->layers()) {
      size_t i = 0;
      while (all[i].layer != m.layer) ++i;
      double* v = sums.data() + i * per;
      if (own) {
        for (size_t e = 0; e < E; ++e) v[e] = static_cast<double>(m.tokens[e]);
        v[E] = static_cast<double>(m.dropped), v[E + 1] = static_cast<double>(m.assignments);
        v[E + 2] = m.aux, v[E + 3] = m.z, v[E + 4] = static_cast<double>(m.micro_batches);
      }
    }
    stage->reset();
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
