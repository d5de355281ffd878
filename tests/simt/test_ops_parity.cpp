// Every op of kernels/ops.h that the CUDA backend runs, called through ops.h with Device::cuda
// tensors (the emulated backend, backend_simt.h) and with Device::cpu tensors on the same random
// data: each output of the CUDA side against the CPU side, within against_cpu.h's tolerance
// (float32 sums in other orders), bitwise where the kernels are (dropout, conversions, embedding
// backward, elementwise). What this guards is the mapping, twice over: ops.cpp's Tensor →
// pointers and sizes, and the kernel backend's op entries → launchers (a swapped argument, a
// wrong size or vocab_begin shows up as a mismatch). Shapes stay small: the emulation runs every
// thread as a fiber.
#include <gtest/gtest.h>

#include <limits>

#include "kernels/ops.h"
#include "tests/simt/twin.h"

namespace megatrain::test {
namespace {

constexpr int64_t N = 9;  // rows: a partial block of the row kernels
constexpr int C = 40;     // width: past a warp, not a multiple of it

TEST_F(OpsParity, MatmulForwardWithAndWithoutBias) {
  const int OC = 10;
  Twin inp = f32({3, 3, C}, 1), w = f32({OC, C}, 2), bias = f32({OC}, 3), out = f32({3, 3, OC}, 4);
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    both([&](const Stream& s, Side d) { matmul_forward(s, out(d), inp(d), w(d), bias(d)); }, p);
    expect_close(out, "out with bias");
    both([&](const Stream& s, Side d) { matmul_forward(s, out(d), inp(d), w(d), Tensor{}); }, p);
    expect_close(out, "out without bias");
  }
}

TEST_F(OpsParity, MatmulBackwardEveryGradientAndSkipped) {
  const int OC = 10;
  Twin inp = f32({N, C}, 5), w = f32({OC, C}, 6), dout = f32({N, OC}, 7);
  Twin dinp = f32({N, C}, 8), dw = f32({OC, C}, 9), db = f32({OC}, 10);  // dw, db accumulate (+=)
  both([&](const Stream& s, Side d) { matmul_backward(s, dinp(d), dw(d), db(d), dout(d), inp(d), w(d)); });
  expect_close(dinp, "dinp");
  expect_close(dw, "dweight");
  expect_close(db, "dbias");
  // The weight gradient alone (no weight needed), then the input gradient alone.
  both([&](const Stream& s, Side d) { matmul_backward(s, Tensor{}, dw(d), Tensor{}, dout(d), inp(d), Tensor{}); });
  expect_close(dw, "dweight alone");
  expect_close(db, "dbias untouched");
  both([&](const Stream& s, Side d) { matmul_backward(s, dinp(d), Tensor{}, Tensor{}, dout(d), inp(d), w(d)); });
  expect_close(dinp, "dinp alone");
}

TEST_F(OpsParity, LayerNormForwardAndBackwardWithAndWithoutResidual) {
  Twin x = f32({N, C}, 11, 2.0f), w = f32({C}, 12), b = f32({C}, 13), out = f32({N, C}, 14);
  Twin mean = f32({N}, 15), rstd = f32({N}, 16);
  Twin dout = f32({N, C}, 17), dres = f32({N, C}, 18), dx = f32({N, C}, 19), dw = f32({C}, 20), db = f32({C}, 21);
  for (bool with_bias : {false, true}) {
    both([&](const Stream& s, Side d) {
      layernorm_forward(s, out(d), mean(d), rstd(d), x(d), w(d), with_bias ? b(d) : Tensor{}, 1e-5f);
    });
    expect_close(out, "out");
    expect_close(mean, "mean");
    expect_close(rstd, "rstd");
  }
  for (bool with_residual : {false, true}) {
    both([&](const Stream& s, Side d) {
      layernorm_backward(s, dx(d), dw(d), db(d), dout(d), with_residual ? dres(d) : Tensor{}, x(d), w(d), mean(d),
                         rstd(d));
    });
    expect_close(dx, "dinp");
    expect_close(dw, "dweight");
    expect_close(db, "dbias");
  }
  both([&](const Stream& s, Side d) {
    layernorm_backward(s, dx(d), dw(d), Tensor{}, dout(d), Tensor{}, x(d), w(d), mean(d), rstd(d));
  });
  expect_close(dw, "dweight without a bias");
}

TEST_F(OpsParity, RmsNormForwardAndBackwardWithAndWithoutResidual) {
  Twin x = f32({N, C}, 22, 2.0f), w = f32({C}, 23), out = f32({N, C}, 24), rstd = f32({N}, 25);
  Twin dout = f32({N, C}, 26), dres = f32({N, C}, 27), dx = f32({N, C}, 28), dw = f32({C}, 29);
  both([&](const Stream& s, Side d) { rmsnorm_forward(s, out(d), rstd(d), x(d), w(d), 1e-6f); });
  expect_close(out, "out");
  expect_close(rstd, "rstd");
  for (bool with_residual : {false, true}) {
    both([&](const Stream& s, Side d) {
      rmsnorm_backward(s, dx(d), dw(d), dout(d), with_residual ? dres(d) : Tensor{}, x(d), w(d), rstd(d));
    });
    expect_close(dx, "dinp");
    expect_close(dw, "dweight");
  }
}

TEST_F(OpsParity, GeluAndSwiglu) {
  Twin x = f32({N, C}, 30, 2.0f), dout = f32({N, C}, 31), out = f32({N, C}, 32), dx = f32({N, C}, 33);
  both([&](const Stream& s, Side d) { gelu_forward(s, out(d), x(d)); });
  expect_close(out, "gelu out");
  both([&](const Stream& s, Side d) { gelu_backward(s, dx(d), dout(d), x(d)); });
  expect_close(dx, "gelu dinp");
  const int F = C / 2;
  Twin h = f32({N, F}, 34), dh = f32({N, F}, 35);
  both([&](const Stream& s, Side d) { swiglu_forward(s, h(d), x(d)); });
  expect_close(h, "swiglu out");
  both([&](const Stream& s, Side d) { swiglu_backward(s, dx(d), dh(d), x(d)); });
  expect_close(dx, "swiglu dinp");
}

TEST_F(OpsParity, RopeBothDirectionsWithGroupedKv) {
  const int B = 2, T = 5, H = 4, Hkv = 2, D = 8;
  Twin qkv = f32({B, T, (H + 2 * Hkv) * D}, 36);
  both([&](const Stream& s, Side d) {
    rope_apply(s, qkv(d), H, Hkv, RopeFrequencies{10000.0}, RopeDirection::forward, 3);
  });
  expect_close(qkv, "forward");
  both([&](const Stream& s, Side d) {
    rope_apply(s, qkv(d), H, Hkv, RopeFrequencies{500.0}, RopeDirection::backward, 0);
  });
  expect_close(qkv, "backward");
}

TEST_F(OpsParity, AttentionForwardAndBackwardGroupedQueryPartialTile) {
  const int B = 2, T = 21, H = 4, Hkv = 2, D = 16;  // T: not a multiple of any tile
  Twin qkv = f32({B, T, (H + 2 * Hkv) * D}, 37), out = f32({B, T, H * D}, 38), lse = f32({B, H, T}, 39);
  both([&](const Stream& s, Side d) { attention_forward(s, out(d), lse(d), qkv(d), H, Hkv); });
  expect_close(out, "out");
  expect_close(lse, "lse");
  Twin dout = f32({B, T, H * D}, 40), dqkv = f32({B, T, (H + 2 * Hkv) * D}, 41);
  both([&](const Stream& s, Side d) { attention_backward(s, dqkv(d), dout(d), qkv(d), out(d), lse(d), H, Hkv); });
  expect_close(dqkv, "dqkv");
}

TEST_F(OpsParity, TokenEmbeddingOfAVocabularyShard) {
  // The shard holds words [7, 17) of 25; tokens below, inside (repeated) and above it.
  const int V = 10, vocab_begin = 7, W = 12;
  Twin tokens = i32({2, 6}, {0, 7, 16, 17, 24, 9, 9, 9, 6, 12, 7, 16});
  Twin wte = f32({V, W}, 42), out = f32({2, 6, W}, 43), dout = f32({2, 6, W}, 44), dwte = f32({V, W}, 45);
  both([&](const Stream& s, Side d) { embedding_forward(s, out(d), tokens(d), wte(d), vocab_begin); });
  expect_bitwise(out, "out");
  both([&](const Stream& s, Side d) { embedding_backward(s, dwte(d), dout(d), tokens(d), vocab_begin); });
  expect_bitwise(dwte, "dwte");
}

TEST_F(OpsParity, PositionEmbeddingPastTheFirstRow) {
  const int T = 4, P = 6, W = 12;
  Twin wpe = f32({P, W}, 46), out = f32({N, W}, 47), dout = f32({N, W}, 48), dwpe = f32({P, W}, 49);
  both([&](const Stream& s, Side d) { position_embedding_forward(s, out(d), wpe(d), T, 3); });
  expect_bitwise(out, "out");
  both([&](const Stream& s, Side d) { position_embedding_backward(s, dwpe(d), dout(d), T, 3); });
  expect_bitwise(dwpe, "dwpe");
}

TEST_F(OpsParity, ElementwiseAddCopyScaleDropout) {
  const int64_t n = 1001;  // odd: the vectorised kernels' scalar tail
  Twin a = f32({n}, 50), b = f32({n}, 51), out = f32({n}, 52);
  both([&](const Stream& s, Side d) { add_forward(s, out(d), a(d), b(d)); });
  expect_bitwise(out, "add");
  both([&](const Stream& s, Side d) { copy(s, out(d), b(d)); });
  expect_bitwise(out, "copy");
  both([&](const Stream& s, Side d) { scale_inplace(s, a(d), 0.37f); });
  expect_bitwise(a, "scale_inplace");
  const RngKey key{9, static_cast<uint32_t>(RngPurpose::dropout), 4, 12345};
  both([&](const Stream& s, Side d) { dropout_apply(s, b(d), 0.3f, key); });
  expect_bitwise(b, "dropout");
}

TEST_F(OpsParity, FiniteCheckAndZeroFill) {
  const int64_t n = 20011;  // more than two of the kernel's 8192-element chunks, and a partial one
  std::vector<float> values = randn(n, 53);
  Twin clean(*backend_, cuda_stream(), {n}, DType::f32, values);
  EXPECT_TRUE(all_finite(cuda_stream(), clean(Side::cuda)));
  EXPECT_TRUE(all_finite(Stream::cpu(), clean(Side::cpu)));
  // One bad value, in the first element, the last chunk's tail, or the middle: found either side.
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  for (const int64_t at : {int64_t{0}, n - 1, n / 2}) {
    for (const float b : bad) {
      std::vector<float> v = values;
      v[static_cast<size_t>(at)] = b;
      Twin x(*backend_, cuda_stream(), {n}, DType::f32, v);
      EXPECT_FALSE(all_finite(cuda_stream(), x(Side::cuda))) << b << " at " << at;
      EXPECT_FALSE(all_finite(Stream::cpu(), x(Side::cpu))) << b << " at " << at;
      // A view that stops before it sees nothing.
      if (at > 0) {
        EXPECT_TRUE(all_finite(cuda_stream(), x(Side::cuda).part(0, Shape{at})));
      }
    }
  }
  values[7] = std::numeric_limits<float>::quiet_NaN();  // zeroed like any other value
  Twin z(*backend_, cuda_stream(), {n}, DType::f32, values);
  both([&](const Stream& s, Side d) { zero_fill(s, z(d).part(3, Shape{n - 4})); });
  expect_bitwise(z, "zero_fill");
  const std::vector<float> got = z.values<float>(Side::cuda);
  EXPECT_EQ(got[2], values[2]);
  EXPECT_EQ(got[static_cast<size_t>(n - 1)], values[static_cast<size_t>(n - 1)]);
  EXPECT_EQ(got[7], 0.0f);
}

TEST_F(OpsParity, ConversionsBothWays) {
  const int64_t n = 333;
  std::vector<float> v = randn(n, 53, 100.0f);
  v[0] = 1e30f;  // beyond bf16's and fp16's range
  Twin x(*backend_, cuda_stream(), {n}, DType::f32, v), back = f32({n}, 54);
  for (DType half : {DType::bf16, DType::f16}) {
    Twin h(*backend_, cuda_stream(), {n}, half, std::vector<uint16_t>(n, 0));
    both([&](const Stream& s, Side d) { convert(s, h(d), x(d)); });
    expect_bitwise(h, half == DType::bf16 ? "f32 to bf16" : "f32 to f16");
    both([&](const Stream& s, Side d) { convert(s, back(d), h(d)); });
    expect_bitwise(back, half == DType::bf16 ? "bf16 to f32" : "f16 to f32");
  }
}

// The three steps of the sharded loss on the second shard: columns [20, 40) of which 17 are words.
TEST_F(OpsParity, CrossEntropyThreeStepsInPlaceAndNot) {
  const int V = 20, valid = 17, vocab_begin = 20;
  for (LossGrad grad : {LossGrad::none, LossGrad::in_place}) {
    Twin logits = f32({N, V}, 55, 3.0f), targets = i32({N}, {0, 20, 21, 36, 19, 25, 30, 2, 36});
    Twin row_max = f32({N}, 56), sum_exp = f32({N}, 57), target_logit = f32({N}, 58), losses = f32({N}, 59);
    both([&](const Stream& s, Side d) { cross_entropy_max(s, row_max(d), logits(d), valid); });
    expect_bitwise(row_max, "row_max");
    both([&](const Stream& s, Side d) {
      cross_entropy_sums(s, sum_exp(d), target_logit(d), logits(d), row_max(d), targets(d), vocab_begin, valid, grad);
    });
    expect_close(sum_exp, "sum_exp");
    expect_bitwise(target_logit, "target_logit");
    expect_close(logits, "logits after step 2");
    both([&](const Stream& s, Side d) {
      cross_entropy_finish(s, losses(d), logits(d), row_max(d), sum_exp(d), target_logit(d), targets(d), vocab_begin,
                           valid, grad, 0.25f);
    });
    expect_close(losses, "losses");
    expect_close(logits, "dlogits");
  }
}

TEST_F(OpsParity, SumSquaresAndAdamW) {
  const int64_t n = 5003;
  Twin x = f32({n}, 60, 3.0f);
  const double want = sum_squares(Stream::cpu(), x(Side::cpu));
  // The CPU adds float lanes of up to 4096 squares before going to double, the kernel adds in
  // double throughout: they agree within float rounding of the sum (as test_grad_norm.cpp).
  EXPECT_NEAR(sum_squares(cuda_stream(), x(Side::cuda)), want, 1e-6 * want);
  // A list (one launch and one wait on CUDA): three pieces of x, the middle one empty, and x
  // itself again; the sum of the pieces is x's.
  const auto pieces = [&](Side d) {
    const Tensor t = x(d);
    return std::vector<Tensor>{t.part(0, Shape{2000}), t.part(2000, Shape{0}), t.part(2000, Shape{n - 2000}), t};
  };
  EXPECT_NEAR(sum_squares(Stream::cpu(), pieces(Side::cpu)), 2 * want, 2e-6 * want);
  EXPECT_NEAR(sum_squares(cuda_stream(), pieces(Side::cuda)), 2 * want, 2e-6 * want);
  std::vector<float> squares = randn(n, 64, 0.1f);
  for (float& e : squares) e *= e;  // a second moment is ≥ 0
  Twin p = f32({n}, 61), g = f32({n}, 62), m = f32({n}, 63, 0.1f);
  Twin v(*backend_, cuda_stream(), {n}, DType::f32, squares);
  const AdamWStep st{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.19f, 0.0975f, 0.5f};
  // 70 entries cut from the arrays, of 0 to 119 elements (the first empty): more than the
  // dispatch hands the backend at once (64) and than one launch carries (48).
  both([&](const Stream& s, Side d) {
    std::vector<AdamWTensors> list;
    int64_t first = 0;
    for (int64_t k = 0; k < 70; ++k) {
      const Shape len{(k * 53) % 120};
      list.push_back({p(d).part(first, len), g(d).part(first, len), m(d).part(first, len), v(d).part(first, len)});
      first += len[0];
    }
    ASSERT_LT(first, n);
    adamw_update(s, list, st);
  });
  expect_close(p, "param");
  expect_close(m, "exp_avg");
  expect_close(v, "exp_avg_sq");
}

}  // namespace
}  // namespace megatrain::test
