#include "parallel/mappings.h"

#include "kernels/check.h"

namespace megatrain {

TensorParallel::TensorParallel(const Comm& tp, const TpOptions& options, int64_t rows, int64_t width)
    : TensorParallel(tp.rank(), tp.size(), options, rows, width) {
  comm_.emplace(tp);
}

TensorParallel::TensorParallel(int rank, int size, const TpOptions& options, int64_t rows, int64_t width)
    : sequence_parallel_(options.sequence_parallel && size > 1), overlap_(options.overlap), rank_(rank), size_(size),
      rows_(rows), width_(width) {
  MT_CHECK(!sequence_parallel_ || rows % size_ == 0,
           "sequence parallelism splits the {} rows of a micro-batch (micro_batch_size · seq_len) into {} equal "
           "shards: they must divide",
           rows, size_);
  counts_.assign(static_cast<size_t>(size_), local_rows() * width);
}

const Comm& TensorParallel::comm() const {
  MT_CHECK(comm_.has_value(), "tensor parallelism of size 1 has no communicator");
  return *comm_;
}

void TensorParallel::check(const Tensor& full, const Tensor& local, const char* what) const {
  MT_CHECK(full.numel() == rows_ * width_ && local.numel() == local_rows() * width_,
           "{}: full tensor {} and local {} do not match ({} rows, {} local, width {})", what, full.shape.str(),
           local.shape.str(), rows_, local_rows(), width_);
  MT_CHECK(sequence_parallel_ || full.data == local.data,
           "{}: without sequence parallelism the full and local tensors must be one buffer", what);
}

void TensorParallel::enter_forward(Tensor full, Tensor local) const {
  check(full, local, "enter_forward");
  if (!sequence_parallel_) return;
  MT_CHECK(full.dtype == local.dtype, "enter_forward: full tensor {} and local {}", dtype_name(full.dtype),
           dtype_name(local.dtype));
  if (full.dtype == DType::f32)
    comm_->all_gather(full.f32(), local.f32(), counts_).wait();
  else
    comm_->all_gather(full.half(), local.half(), counts_).wait();  // 16-bit activations (model/stage.h)
}

Work TensorParallel::enter_backward(Tensor dlocal, Tensor dfull) const {
  check(dfull, dlocal, "enter_backward");
  if (size_ == 1) return Work{};
  if (sequence_parallel_) return comm_->reduce_scatter(dlocal.f32(), dfull.f32(), counts_);
  return comm_->all_reduce(dfull.f32(), dfull.numel());
}

void TensorParallel::leave_forward(Tensor local, Tensor partial) const {
  check(partial, local, "leave_forward");
  if (size_ == 1) return;
  if (sequence_parallel_)
    comm_->reduce_scatter(local.f32(), partial.f32(), counts_).wait();
  else
    comm_->all_reduce(partial.f32(), partial.numel()).wait();
}

void TensorParallel::leave_backward(Tensor dfull, Tensor dlocal) const {
  check(dfull, dlocal, "leave_backward");
  if (sequence_parallel_) comm_->all_gather(dfull.f32(), dlocal.f32(), counts_).wait();
}

}  // namespace megatrain
