#include "parallel/tp_shape.h"

#include "kernels/check.h"

namespace megatrain {

TpShape::TpShape(int rank, int size, const TpOptions& options, int64_t rows, int64_t width)
    : sequence_parallel_(options.sequence_parallel && size > 1),
      overlap_(options.overlap),
      rank_(rank),
      size_(size),
      rows_(rows),
      width_(width) {
  MT_CHECK(!sequence_parallel_ || rows % size_ == 0,
           "sequence parallelism splits the {} rows of a micro-batch (micro_batch_size · seq_len) into {} equal "
           "shards: they must divide",
           rows, size_);
}

}  // namespace megatrain
