// The bf16 activation paths of the CPU ops ([Note: bf16 activations] in kernels/ops.h): each op on
// bf16 tensors against the same op on float32 tensors holding the same (bf16-representable) values.
// The bf16 op computes as the float32 one and rounds each bf16 result once (round to nearest, ties
// to even), so:
//  - where the two compute alike (norms, activations, RoPE), a bf16 result is the float32 op's
//    value rounded, bitwise;
//  - where they may sum in another order (GEMMs and attention: block products over float32 views
//    of other strides), within bf16's unit roundoff u = 2^-8 of the float32 op's value plus that
//    value's own evaluation-order error (the GEMM bound of op_harness.h), |got − want| ≤ u·|want| +
//    slack, and at most 1 % of the elements not the float32 value rounded: an order change moves a
//    rounding only where the value lies within that change of a midpoint between two bf16
//    neighbours, a share of about 2^8 times the relative change, near 0.2 % for float32 sums of 70
//    terms (here none move).
// Float32 results of bf16 inputs (GEMM gradients, log-sum-exp) are held to the float32 bound alone.
// A rounding by truncation (half the elements off), a skipped rounding of a GEMM's float32 operand,
// or a wrong operand is far outside.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/half.h"
#include "kernels/ops.h"
#include "tests/kernels/op_harness.h"

namespace megatrain {
namespace {

using test::kUnitRoundoff;

constexpr double kBf16Roundoff = 0x1p-8;

struct Bf16Buffer {
  std::vector<uint16_t> bits;
  Tensor tensor(Shape s) { return Tensor(bits.data(), s, DType::bf16); }
  std::vector<float> values() const {
    std::vector<float> v(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) v[i] = bf16_to_float(bits[i]);
    return v;
  }
};

// Random values rounded to bf16: the float32 copy and the bits hold the same numbers.
struct Operand {
  std::vector<float> f32;
  Bf16Buffer bf16;
};
Operand random_operand(size_t n, uint32_t stream, float scale = 1.0f) {
  Operand o{test::randn(n, stream, scale), {std::vector<uint16_t>(n)}};
  for (size_t i = 0; i < n; ++i) {
    o.bf16.bits[i] = float_to_bf16(o.f32[i]);
    o.f32[i] = bf16_to_float(o.bf16.bits[i]);
  }
  return o;
}

// got (bf16) against want (the float32 op): with slack 0 each element is want rounded; otherwise
// |got − want| ≤ u·|want| + slack, and at most 1 % of the elements are not want rounded.
void expect_rounded(const Bf16Buffer& got, const std::vector<float>& want, double slack, const std::string& what) {
  ASSERT_EQ(got.bits.size(), want.size()) << what;
  size_t not_rounded = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got.bits[i] == float_to_bf16(want[i])) continue;
    ASSERT_GT(slack, 0.0) << what << " at " << i << ": bits " << got.bits[i] << " for " << want[i] << ", rounded "
                          << float_to_bf16(want[i]);
    ASSERT_NEAR(bf16_to_float(got.bits[i]), want[i], kBf16Roundoff * std::fabs(want[i]) + slack)
        << what << " at " << i << " (bf16 bits " << got.bits[i] << ")";
    ++not_rounded;
  }
  EXPECT_LE(not_rounded, want.size() / 100) << what << ": elements that are not the float32 value rounded";
}

double max_abs(const std::vector<float>& v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

const Stream kBf16 = Stream::cpu(Precision::bf16);

// The norms' forward writes bf16; its statistics stay float32 and bitwise those of the float32 op.
// Their backward has no bf16 tensor (it reads the float32 input, weight and statistics, and the
// float32 input gradient of the GEMM that read the output), so after a bf16 forward it is the
// float32 op's, unchanged.
TEST(Bf16Ops, NormsWriteTheRoundedFloat32Output) {
  constexpr int64_t N = 9, C = 70;
  const std::vector<float> x = test::randn(N * C, 1, 3.0f), w = test::randn(C, 2), b = test::randn(C, 3);
  const Tensor X(const_cast<float*>(x.data()), Shape{N, C}), W(const_cast<float*>(w.data()), Shape{C});
  for (const std::string norm : {"layernorm", "layernorm without bias", "rmsnorm"}) {
    std::vector<float> want(N * C), mean(N), rstd(N), mean16(N), rstd16(N);
    Bf16Buffer got{std::vector<uint16_t>(N * C)};
    const Tensor Y(want.data(), Shape{N, C}), Y16 = got.tensor(Shape{N, C});
    const Tensor M(mean.data(), Shape{N}), R(rstd.data(), Shape{N}), M16(mean16.data(), Shape{N}),
        R16(rstd16.data(), Shape{N});
    if (norm == "rmsnorm") {
      rmsnorm_forward(kBf16, Y, R, X, W, 1e-5f);
      rmsnorm_forward(kBf16, Y16, R16, X, W, 1e-5f);
    } else {
      const Tensor B = norm == "layernorm" ? Tensor(const_cast<float*>(b.data()), Shape{C}) : Tensor{};
      layernorm_forward(kBf16, Y, M, R, X, W, B, 1e-5f);
      layernorm_forward(kBf16, Y16, M16, R16, X, W, B, 1e-5f);
    }
    EXPECT_EQ(mean16, mean) << norm;
    EXPECT_EQ(rstd16, rstd) << norm;
    expect_rounded(got, want, 0.0, norm);
  }
}

TEST(Bf16Ops, ActivationsReadAndWriteBf16) {
  constexpr int64_t N = 7, F = 45;
  Operand x = random_operand(N * 2 * F, 4, 2.0f);
  const std::vector<float> dy = test::randn(N * 2 * F, 5);
  for (const bool swiglu : {false, true}) {
    const int64_t out_n = swiglu ? N * F : N * 2 * F;
    const Shape in_shape{N, 2 * F}, out_shape = swiglu ? Shape{N, F} : Shape{N, 2 * F};
    std::vector<float> y(out_n), dx(N * 2 * F);
    Bf16Buffer y16{std::vector<uint16_t>(out_n)}, dx16{std::vector<uint16_t>(N * 2 * F)};
    const Tensor X(x.f32.data(), in_shape), DY(const_cast<float*>(dy.data()), out_shape);
    if (swiglu) {
      swiglu_forward(kBf16, Tensor(y.data(), out_shape), X);
      swiglu_forward(kBf16, y16.tensor(out_shape), x.bf16.tensor(in_shape));
      swiglu_backward(kBf16, Tensor(dx.data(), in_shape), DY, X);
      swiglu_backward(kBf16, dx16.tensor(in_shape), DY, x.bf16.tensor(in_shape));
    } else {
      gelu_forward(kBf16, Tensor(y.data(), out_shape), X);
      gelu_forward(kBf16, y16.tensor(out_shape), x.bf16.tensor(in_shape));
      gelu_backward(kBf16, Tensor(dx.data(), in_shape), DY, X);
      gelu_backward(kBf16, dx16.tensor(in_shape), DY, x.bf16.tensor(in_shape));
    }
    const std::string op = swiglu ? "swiglu" : "gelu";
    expect_rounded(y16, y, 0.0, op + " forward");
    expect_rounded(dx16, dx, 0.0, op + " backward");
  }
}

TEST(Bf16Ops, RopeRotatesBf16InPlaceBothWays) {
  constexpr int B = 2, T = 5, H = 4, Hkv = 2, D = 8;
  const int64_t n = int64_t{B} * T * (H + 2 * Hkv) * D;
  const Shape shape{B, T, (H + 2 * Hkv) * D};
  for (const RopeDirection dir : {RopeDirection::forward, RopeDirection::backward}) {
    Operand qkv = random_operand(static_cast<size_t>(n), 6);
    rope_apply(kBf16, Tensor(qkv.f32.data(), shape), H, Hkv, RopeFrequencies{10000.0}, dir, 3);
    rope_apply(kBf16, qkv.bf16.tensor(shape), H, Hkv, RopeFrequencies{10000.0}, dir, 3);
    expect_rounded(qkv.bf16, qkv.f32, 0.0, dir == RopeDirection::forward ? "rope forward" : "rope backward");
  }
}

TEST(Bf16Ops, CopyMovesBf16Bits) {
  Operand x = random_operand(33, 7);
  Bf16Buffer y{std::vector<uint16_t>(33)};
  copy(kBf16, y.tensor(Shape{33}), x.bf16.tensor(Shape{33}));
  EXPECT_EQ(y.bits, x.bf16.bits);
}

// The GEMM bound of a float32 sum of K products (op_harness.h), per element of `want`, at its
// largest: 2·K·u₃₂·max|terms|·K covers every element of a product of values up to `scale`.
double gemm_slack(int K, double a_max, double b_max) { return 2.0 * K * kUnitRoundoff * K * a_max * b_max; }

TEST(Bf16Ops, LinearLayersTakeBf16OperandsAndResults) {
  constexpr int64_t N = 37, C = 45, OC = 29;
  Operand x = random_operand(N * C, 8), w = random_operand(OC * C, 9), dy = random_operand(N * OC, 10);
  const std::vector<float> bias = test::randn(OC, 11);
  const Tensor Bias(const_cast<float*>(bias.data()), Shape{OC});
  // The float32 op on the same values (a bf16 stream rounds float32 operands: these are exact).
  std::vector<float> y(N * OC), dx(N * C), dw(OC * C, 0.5f), db(OC, 0.25f);
  matmul_forward(kBf16, Tensor(y.data(), Shape{N, OC}), Tensor(x.f32.data(), Shape{N, C}),
                 Tensor(w.f32.data(), Shape{OC, C}), Bias);
  matmul_backward(kBf16, Tensor(dx.data(), Shape{N, C}), Tensor(dw.data(), Shape{OC, C}), Tensor(db.data(), Shape{OC}),
                  Tensor(dy.f32.data(), Shape{N, OC}), Tensor(x.f32.data(), Shape{N, C}),
                  Tensor(w.f32.data(), Shape{OC, C}));
  const double fwd_slack = gemm_slack(C, max_abs(x.f32), max_abs(w.f32)) + 2 * kUnitRoundoff * max_abs(bias);
  // Every mix of bf16 and float32 operands, as the model mixes them (bf16 activations, float32 weights).
  for (int mix = 1; mix < 8; ++mix) {
    const bool x16 = mix & 1, w16 = mix & 2, d16 = mix & 4;
    const Tensor X = x16 ? x.bf16.tensor(Shape{N, C}) : Tensor(x.f32.data(), Shape{N, C});
    const Tensor W = w16 ? w.bf16.tensor(Shape{OC, C}) : Tensor(w.f32.data(), Shape{OC, C});
    const Tensor DY = d16 ? dy.bf16.tensor(Shape{N, OC}) : Tensor(dy.f32.data(), Shape{N, OC});
    const std::string what = std::string("x ") + (x16 ? "bf16" : "f32") + ", w " + (w16 ? "bf16" : "f32") + ", dout " +
                             (d16 ? "bf16" : "f32");
    std::vector<float> y32(N * OC), dx2(N * C), dw2(OC * C, 0.5f), db2(OC, 0.25f);
    Bf16Buffer y16{std::vector<uint16_t>(N * OC)};
    matmul_forward(kBf16, y16.tensor(Shape{N, OC}), X, W, Bias);
    expect_rounded(y16, y, fwd_slack, what + ": bf16 forward");
    matmul_forward(kBf16, Tensor(y32.data(), Shape{N, OC}), X, W, Bias);
    test::expect_near_all(y32, test::to_double(y), fwd_slack, 0.0, (what + ": float32 forward").c_str());
    matmul_backward(kBf16, Tensor(dx2.data(), Shape{N, C}), Tensor(dw2.data(), Shape{OC, C}),
                    Tensor(db2.data(), Shape{OC}), DY, X, W);
    test::expect_near_all(dx2, test::to_double(dx), gemm_slack(OC, max_abs(dy.f32), max_abs(w.f32)), 0.0,
                          (what + ": dinp").c_str());
    test::expect_near_all(dw2, test::to_double(dw), gemm_slack(N, max_abs(dy.f32), max_abs(x.f32)) + 1e-6, 0.0,
                          (what + ": dweight").c_str());
    test::expect_near_all(db2, test::to_double(db), 2.0 * N * kUnitRoundoff * N * max_abs(dy.f32) + 1e-6, 0.0,
                          (what + ": dbias").c_str());
  }
}

TEST(Bf16Ops, Bf16GemmOperandsNeedABf16Stream) {
  Operand x = random_operand(6, 12), w = random_operand(6, 13);
  std::vector<float> y(4);
  for (const Precision p : {Precision::fp32, Precision::fp16})
    EXPECT_THROW(matmul_forward(Stream::cpu(p), Tensor(y.data(), Shape{2, 2}), x.bf16.tensor(Shape{2, 3}),
                                Tensor(w.f32.data(), Shape{2, 3}), Tensor{}),
                 Error)
        << precision_name(p);
}

// got (bf16) against the float32 op's want where the bf16 op also rounds operands of its sums to bf16
// (attention's P, dO and dS; kernels/cpu/attention.cpp [Note: bf16 block products]): each element
// within 4 bf16 rounding steps of the largest |want| (a rounded operand moves a sum of non-negative
// weights by at most one step of its largest term), and the mean error below one step of the mean
// |want| (roundings of either sign mostly cancel). A wrong operand, block or transpose is off by O(1).
void expect_near_rounded_sums(const Bf16Buffer& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.bits.size(), want.size()) << what;
  double top = 0.0, sum_want = 0.0, sum_err = 0.0;
  for (float w : want) top = std::max(top, static_cast<double>(std::fabs(w)));
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(bf16_to_float(got.bits[i])) - want[i]);
    ASSERT_LE(err, 4 * kBf16Roundoff * top)
        << what << " at " << i << ": " << bf16_to_float(got.bits[i]) << " for " << want[i];
    sum_err += err;
    sum_want += std::fabs(want[i]);
  }
  EXPECT_LE(sum_err, kBf16Roundoff * sum_want) << what << ": mean error";
}

// q/k/v over more than one key block (T = 70), multi-head (Hkv = H) and grouped-query (Hkv < H).
TEST(Bf16Ops, AttentionOnBf16QkvWithFloat32Softmax) {
  constexpr int B = 2, T = 70, H = 4, D = 16;
  for (const int Hkv : {H, 2}) {
    const std::string heads = fmt::format("H {}, Hkv {}: ", H, Hkv);
    const Shape qkv_shape{B, T, (H + 2 * Hkv) * D}, out_shape{B, T, H * D}, lse_shape{B, H, T};
    const int64_t n_qkv = qkv_shape.numel(), n_out = out_shape.numel(), n_lse = lse_shape.numel();
    Operand qkv = random_operand(static_cast<size_t>(n_qkv), 14);
    std::vector<float> out(n_out), lse(n_lse), lse16(n_lse), dqkv(n_qkv);
    Bf16Buffer out16{std::vector<uint16_t>(n_out)}, dqkv16{std::vector<uint16_t>(n_qkv)};
    attention_forward(kBf16, Tensor(out.data(), out_shape), Tensor(lse.data(), lse_shape),
                      Tensor(qkv.f32.data(), qkv_shape), H, Hkv);
    attention_forward(kBf16, out16.tensor(out_shape), Tensor(lse16.data(), lse_shape), qkv.bf16.tensor(qkv_shape), H,
                      Hkv);
    // Scores sum D products of values below max|qkv| (q and k are bf16 in both ops): float32
    // evaluation order moves them by at most the GEMM bound. The output sums T probabilities, rounded
    // to bf16 in the bf16 op, times v.
    const double m = max_abs(qkv.f32);
    expect_near_rounded_sums(out16, out, heads + "attention output");
    test::expect_near_all(lse16, test::to_double(lse), gemm_slack(D, m, m), 0.0, (heads + "log-sum-exp").c_str());
    // Backward from the bf16 forward's own output, as the model runs it: the float32 op on its values
    // (the bf16 op also rounds dO and dS).
    std::vector<float> out_values = out16.values();
    std::vector<float> dout = test::randn(n_out, 15);
    const Tensor dOut(dout.data(), out_shape), Lse16(lse16.data(), lse_shape);
    attention_backward(kBf16, Tensor(dqkv.data(), qkv_shape), dOut, Tensor(qkv.f32.data(), qkv_shape),
                       Tensor(out_values.data(), out_shape), Lse16, H, Hkv);
    attention_backward(kBf16, dqkv16.tensor(qkv_shape), dOut, qkv.bf16.tensor(qkv_shape), out16.tensor(out_shape),
                       Lse16, H, Hkv);
    expect_near_rounded_sums(dqkv16, dqkv, heads + "dqkv");
  }
}

// An op's activations share one dtype (on CUDA streams they are float32: tests/simt's
// OpsParity.Bf16ActivationsOnACudaStreamAreAnError).
TEST(Bf16Ops, MixedActivationDtypesAreRefused) {
  Operand x = random_operand(8, 16);
  std::vector<float> y(8);
  EXPECT_THROW(gelu_forward(kBf16, Tensor(y.data(), Shape{8}), x.bf16.tensor(Shape{8})), Error);
  EXPECT_THROW(copy(kBf16, x.bf16.tensor(Shape{8}), Tensor(y.data(), Shape{8})), Error);
}

}  // namespace
}  // namespace megatrain
