#include "model/tp_shared.h"

#include <cstring>

namespace megatrain {

TpSharedParams::TpSharedParams(const ParamLayout& layout, const Comm& tp) : layout_(layout), rank_(tp.rank()) {
  MT_CHECK(layout.tp().size == tp.size() && layout.tp().rank == tp.rank(),
           "the layout is for tp rank {} of {}, the communicator is rank {} of {}", layout.tp().rank,
           layout.tp().size, tp.rank(), tp.size());
  for (const SharedRange& r : layout.shared()) {
    if (!r.partial_grad) continue;
    if (!groups_.contains(r.sharers))
      groups_.emplace(r.sharers, Group{tp.split(tp.rank() / r.sharers, tp.rank(), fmt::format("tp-shared-{}", r.sharers)),
                                       {}});
    std::vector<float>& pack = groups_.at(r.sharers).pack;
    pack.resize(pack.size() + static_cast<size_t>(r.range.size()));
  }
}

void TpSharedParams::reduce_partial_grads(float* grads, FlatRange range) const {
  for (const auto& [sharers, group] : groups_) {
    // Pack, reduce once, unpack: the ranges of one sharer count, in flat order.
    const auto each = [&](auto&& f) {
      int64_t at = 0;
      for (const SharedRange& r : layout_.shared()) {
        if (!r.partial_grad || r.sharers != sharers) continue;
        const FlatRange mine = flat_intersect(r.range, range);
        if (mine.size() == 0) continue;
        f(grads + (mine.begin - range.begin), group.pack.data() + at, mine.size());
        at += mine.size();
      }
      return at;
    };
    const auto bytes = [](int64_t n) { return sizeof(float) * static_cast<size_t>(n); };
    const int64_t n = each([&](float* g, float* p, int64_t k) { std::memcpy(p, g, bytes(k)); });
    if (n == 0) continue;
    group.comm.all_reduce(group.pack.data(), n).wait();
    each([&](float* g, float* p, int64_t k) { std::memcpy(g, p, bytes(k)); });
  }
}

double TpSharedParams::sum_squares(const float* grads, FlatRange range) const {
  auto squares = [&](int64_t begin, int64_t end) {
    double sum = 0.0;
    const float* g = grads - range.begin;
#pragma omp parallel for simd reduction(+ : sum) schedule(static)
    for (int64_t i = begin; i < end; ++i) sum += static_cast<double>(g[i]) * g[i];
    return sum;
  };
  double sum = 0.0;
  int64_t at = range.begin;
  for (const SharedRange& r : layout_.shared()) {
    if (rank_ % r.sharers == 0) continue;  // the first sharer counts it
    const FlatRange skip = flat_intersect(r.range, range);
    if (skip.size() <= 0) continue;
    sum += squares(at, skip.begin);
    at = skip.end;
  }
  return sum + squares(at, range.end);
}

}  // namespace megatrain
