#include "model/linear.h"

namespace megatrain {

void column_parallel_forward(const Stream& s, Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  matmul_forward(s, out, inp, weight, bias);
}

void column_parallel_backward(const Stream& s, const TensorParallel& tp, Tensor dinp, Tensor dinp_full,
                              Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight) {
  matmul_backward(s, dinp_full, Tensor{}, Tensor{}, dout, inp, weight);
  Work reduce = tp.enter_backward(dinp, dinp_full);
  if (!tp.overlap()) reduce.wait();
  if (dweight.data != nullptr) matmul_backward(s, Tensor{}, dweight, dbias, dout, inp, weight);
  reduce.wait();
}

void row_parallel_forward(const Stream& s, const TensorParallel& tp, Tensor out, Tensor partial, Tensor inp,
                          Tensor weight, Tensor bias) {
  matmul_forward(s, partial, inp, weight, tp.rank() == 0 ? bias : Tensor{});
  tp.leave_forward(out, partial);
}

void row_parallel_backward(const Stream& s, const TensorParallel& tp, Tensor dinp, Tensor dweight, Tensor dbias,
                           Tensor dout_full, Tensor dout, Tensor inp, Tensor weight) {
  tp.leave_backward(dout_full, dout);
  if (dweight.data == nullptr) dbias = Tensor{};
  matmul_backward(s, dinp, dweight, dbias, dout_full, inp, weight);
}

void linear_weight_backward(const Stream& s, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp) {
  matmul_backward(s, Tensor{}, dweight, dbias, dout, inp, Tensor{});
}

}  // namespace megatrain
