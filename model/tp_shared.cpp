#include "model/tp_shared.h"

#include "kernels/ops.h"

namespace megatrain {

TpSharedParams::TpSharedParams(const ParamLayout& layout, const Comm& tp, const Stream& stream)
    : layout_(layout), stream_(stream) {
  MT_CHECK(layout.tp().size == tp.size() && layout.tp().rank == tp.rank(),
           "the layout is for tp rank {} of {}, the communicator is rank {} of {}", layout.tp().rank,
           layout.tp().size, tp.rank(), tp.size());
  std::map<int, int64_t> floats;  // sharers → the partial-gradient values of that count
  for (const SharedRange& r : layout.shared())
    if (r.partial_grad) floats[r.sharers] += r.range.size();
  for (const auto& [sharers, n] : floats)
    groups_.emplace(sharers, Group{tp.split(tp.rank() / sharers, tp.rank(), fmt::format("tp-shared-{}", sharers)),
                                   FlatBuffer(n, stream)});
}

void TpSharedParams::reduce_partial_grads(float* grads, FlatRange range) const {
  const Device device = stream_.device;
  for (const auto& [sharers, group] : groups_) {
    // Pack, reduce once, unpack: the ranges of one sharer count, in flat order.
    const auto each = [&](auto&& f) {
      int64_t at = 0;
      for (const SharedRange& r : layout_.shared()) {
        if (!r.partial_grad || r.sharers != sharers) continue;
        const FlatRange mine = flat_intersect(r.range, range);
        if (mine.size() == 0) continue;
        f(Tensor(grads + (mine.begin - range.begin), Shape{mine.size()}).on(device), group.pack.part(at, mine.size()));
        at += mine.size();
      }
      return at;
    };
    const int64_t n = each([&](Tensor g, Tensor p) { copy(stream_, p, g); });
    if (n == 0) continue;
    group.comm.all_reduce(group.pack.data(), n).wait();
    each([&](Tensor g, Tensor p) { copy(stream_, g, p); });
  }
}

}  // namespace megatrain
