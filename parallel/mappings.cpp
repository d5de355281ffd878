#include "parallel/mappings.h"

#include "kernels/check.h"

namespace megatrain {

TensorParallel::TensorParallel(const Comm& tp, const TpOptions& options, int64_t rows, int64_t width)
    : TpShape(tp.rank(), tp.size(), options, rows, width), comm_(tp),
      counts_(static_cast<size_t>(tp.size()), local_rows() * width) {}

const Comm& TensorParallel::comm() const {
  MT_CHECK(comm_.has_value(), "tensor parallelism of size 1 has no communicator");
  return *comm_;
}

void TensorParallel::check(const Tensor& full, const Tensor& local, const char* what) const {
  MT_CHECK(full.numel() == rows() * width() && local.numel() == local_rows() * width(),
           "{}: full tensor {} and local {} do not match ({} rows, {} local, width {})", what, full.shape.str(),
           local.shape.str(), rows(), local_rows(), width());
  MT_CHECK(sequence_parallel() || full.data == local.data,
           "{}: without sequence parallelism the full and local tensors must be one buffer", what);
}

void TensorParallel::enter_forward(Tensor full, Tensor local) const {
  check(full, local, "enter_forward");
  if (!sequence_parallel()) return;
  MT_CHECK(full.dtype == local.dtype, "enter_forward: full tensor {} and local {}", dtype_name(full.dtype),
           dtype_name(local.dtype));
  if (full.dtype == DType::f32)
    comm_->all_gather(full.f32(), local.f32(), counts_).wait();
  else
    comm_->all_gather(full.half(), local.half(), counts_).wait();  // 16-bit activations (model/stage.h)
}

Work TensorParallel::enter_backward(Tensor dlocal, Tensor dfull) const {
  check(dfull, dlocal, "enter_backward");
  if (size() == 1) return Work{};
  if (sequence_parallel()) return comm_->reduce_scatter(dlocal.f32(), dfull.f32(), counts_);
  return comm_->all_reduce(dfull.f32(), dfull.numel());
}

void TensorParallel::leave_forward(Tensor local, Tensor partial) const {
  check(partial, local, "leave_forward");
  if (size() == 1) return;
  if (sequence_parallel())
    comm_->reduce_scatter(local.f32(), partial.f32(), counts_).wait();
  else
    comm_->all_reduce(partial.f32(), partial.numel()).wait();
}

void TensorParallel::leave_backward(Tensor dfull, Tensor dlocal) const {
  check(dfull, dlocal, "leave_backward");
  if (sequence_parallel()) comm_->all_gather(dfull.f32(), dlocal.f32(), counts_).wait();
}

}  // namespace megatrain
