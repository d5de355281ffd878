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

}  // namespace megatrain
