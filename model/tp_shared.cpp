#include "model/tp_shared.h"

#include <cstring>

#include "kernels/ops.h"

namespace megatrain {

TpSharedParams::TpSharedParams(const ParamLayout& layout, const Comm& tp) : layout_(layout) {
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
  double sum = 0.0;
  for (const FlatRange& o : layout_.owned()) {
    const FlatRange mine = flat_intersect(o, range);
    float* g = const_cast<float*>(grads) + (mine.begin - range.begin);  // read only
    if (mine.size() > 0) sum += megatrain::sum_squares(Stream::cpu(), Tensor(g, Shape{mine.size()}));
  }
  return sum;
}

}  // namespace megatrain
