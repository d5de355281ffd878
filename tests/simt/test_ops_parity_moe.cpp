// The Mixture of Experts token-movement ops of kernels/ops.h on CUDA tensors (kernels/cuda/moe_router.cu
// through the device backend) against the same calls on CPU tensors: a plan of 9 tokens × 2 choices
// whose rows are a permutation with two assignments dropped (−1), rows of 40 floats (past a warp).
// Copies and the gate products are bitwise; the combine and the gates' gradient are sums.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/ops.h"
#include "tests/simt/twin.h"

namespace megatrain::test {
namespace {

TEST_F(OpsParity, MoeTokenMovementBothWays) {
  const int64_t N = 9;
  const int k = 2, C = 40;
  std::vector<int32_t> plan(static_cast<size_t>(N * k));
  for (int64_t a = 0; a < N * k; ++a) plan[static_cast<size_t>(a)] = static_cast<int32_t>((a * 7) % (N * k));
  plan[3] = plan[10] = -1;  // dropped by capacity: rows 3 and 16 of the send buffer stay as they were
  Twin row = i32({N, k}, plan), gates = f32({N, k}, 31), x = f32({N, C}, 32), send = f32({N * k, C}, 33);
  Twin y = f32({N, C}, 34), dy = f32({N, C}, 35), dgates = f32({N, k}, 36), dout = f32({N * k, C}, 37);
  Twin dx = f32({N, C}, 38);
  both([&](const Stream& s, Side d) { moe_permute(s, send(d), x(d), row(d)); });
  expect_bitwise(send, "send");
  both([&](const Stream& s, Side d) { moe_unpermute(s, y(d), send(d), row(d), gates(d)); });
  expect_close(y, "y");
  both([&](const Stream& s, Side d) {
    moe_unpermute_backward(s, dgates(d), dout(d), dy(d), send(d), row(d), gates(d));
  });
  expect_close(dgates, "dgates");
  expect_bitwise(dout, "dout");
  both([&](const Stream& s, Side d) { moe_permute_backward(s, dx(d), dout(d), row(d)); });
  expect_close(dx, "dx");
}

}  // namespace
}  // namespace megatrain::test
