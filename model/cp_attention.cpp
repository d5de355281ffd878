#include "model/cp_attention.h"

#include "kernels/check.h"

namespace megatrain {

CpAttention::CpAttention(Comm cp, const CpAttentionSpec& spec)
    : comm_(std::move(cp)),
      split_(spec.split),
      B_(spec.B),
      heads_(spec.heads),
      positions_(RowPositions::of_split(spec.split, spec.B)) {
  MT_CHECK(split_.cp > 1 && split_.seq_len % (2 * split_.cp) == 0,
           "context attention needs cp > 1 and seq_len a multiple of 2·cp, got cp {} and seq_len {}", split_.cp,
           split_.seq_len);
  MT_CHECK(comm_.size() == split_.cp && comm_.rank() == split_.rank,
           "the cp group has {} ranks (this one {}), the split says cp {} rank {}", comm_.size(), comm_.rank(),
           split_.cp, split_.rank);
}

void CpAttention::sum_over_sequence(std::span<double> values) const {
  comm_.all_reduce(values.data(), static_cast<int64_t>(values.size())).wait();
}

}  // namespace megatrain
