#include "optim/clip.h"

#include <cmath>

#include "kernels/ops.h"

namespace megatrain {
namespace {

double sum_over(double x, const std::vector<const Comm*>& comms) {
  for (const Comm* c : comms)
    if (c) c->all_reduce(&x, 1).wait();
  return x;
}

}  // namespace

std::vector<Tensor> owned_grads(const Stream& s, const ParamLayout& layout, const float* grads, FlatRange range) {
  std::vector<Tensor> list;
  for (const FlatRange& o : layout.owned()) {
    const FlatRange mine = flat_intersect(o, range);
    float* g = const_cast<float*>(grads) + (mine.begin - range.begin);  // read only
    if (mine.size() > 0) list.push_back(Tensor(g, Shape{mine.size()}).on(s.device));
  }
  return list;
}

double grad_norm(const Stream& s, const std::vector<GradPart>& parts, const std::vector<const Comm*>& then) {
  double squares = 0.0;
  for (const GradPart& p : parts) squares += sum_over(sum_squares(s, p.grads), p.sum_over);
  return std::sqrt(sum_over(squares, then));
}

int64_t overflow_key(bool loss, bool grad, bool reduced_grad, int rank, int ranks) {
  const int64_t cause = loss ? 3 : grad ? 2 : reduced_grad ? 1 : 0;
  return cause == 0 ? 0 : cause * ranks + (ranks - 1 - rank);
}

Overflow overflow_of(int64_t max_key, int ranks) {
  if (max_key == 0) return {};
  static constexpr const char* kWhere[] = {"", "reduced grad", "grad", "loss"};
  return {static_cast<int>(ranks - 1 - max_key % ranks), kWhere[max_key / ranks]};
}

}  // namespace megatrain
