// 16-bit floats (kernels/half.h, kernels/cpu/convert.h). bfloat16 and fp16: the conversion from
// float32 against an independent definition of round-to-nearest-even (the two neighbours of x, the
// nearer by exact double arithmetic, a tie to the even mantissa; for fp16 the neighbours are found
// in the sorted list of all 65 536 values), every value round-tripping exactly, NaN, infinity and
// overflow; and the bfloat16 GEMM against a double-precision product of the same bfloat16 values,
// within the float32 accumulation bound γ(K + 2)·(|α|·Σ|a·b| + |β|·|c|), for every transpose and
// odd sizes with leading dimensions larger than the rows. The linear layers on a bf16 or fp16
// stream multiply the 16-bit roundings of their inputs: forward and both backward products within
// the same bound of the double product of the rounded values, and measurably off the float32 result.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/half.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/convert.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

namespace megatrain {
namespace {

// The bfloat16 value nearest to x, ties to even, by comparing x with its two neighbours.
float reference_round(float x) {
  const uint32_t lo_bits = std::bit_cast<uint32_t>(x) >> 16;
  const float lo = bf16_to_float(static_cast<uint16_t>(lo_bits));       // x cut toward zero
  const float up = bf16_to_float(static_cast<uint16_t>(lo_bits + 1));   // the next one away from zero (maybe ∞)
  // Past the largest finite value the next one is infinity, at 2^128 for rounding (IEEE overflow).
  const double up_at = std::isinf(up) ? std::copysign(std::ldexp(1.0, 128), up) : static_cast<double>(up);
  const double d_lo = std::fabs(static_cast<double>(x) - lo), d_up = std::fabs(up_at - x);
  if (d_lo != d_up) return d_lo < d_up ? lo : up;
  return (lo_bits & 1u) == 0 ? lo : up;
}

TEST(Bf16, RoundsToNearestEvenAsDefined) {
  const RngKey k{3, static_cast<uint32_t>(RngPurpose::test), 0, 0};
  for (uint64_t i = 0; i < 200000; ++i) {
    // Random bits over the finite range (every exponent), and the exact midpoints.
    uint32_t u = rng_words(k, i)[0];
    if ((u & 0x7f800000u) == 0x7f800000u) continue;
    if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;  // a tie
    const float x = std::bit_cast<float>(u);
    ASSERT_EQ(std::bit_cast<uint32_t>(bf16_to_float(float_to_bf16(x))), std::bit_cast<uint32_t>(reference_round(x)))
        << std::hexfloat << x;
  }
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 0x1p-8f)), 1.0f);                  // tie, 1.0 is even
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 0x3p-8f)), 1.0f + 0x1p-6f);        // tie, up to even
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);  // past the tie
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::max()))));
  EXPECT_EQ(bf16_to_float(float_to_bf16(-std::numeric_limits<float>::infinity())),
            -std::numeric_limits<float>::infinity());
  const float nan = bf16_to_float(float_to_bf16(-std::numeric_limits<float>::quiet_NaN()));
  EXPECT_TRUE(std::isnan(nan));
  EXPECT_TRUE(std::signbit(nan));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::bit_cast<float>(0x7f800001u)))));  // a NaN whose top bits are inf's
}

// The fp16 value nearest to x, ties to the even bit pattern, from the sorted list of all finite
// fp16 values; past the largest (65504) the next one is infinity, at 65536 for rounding (IEEE).
float reference_round_fp16(float x) {
  static const std::vector<float> values = [] {
    std::vector<float> v;
    for (uint32_t h = 0; h < 0x7c00u; ++h) v.push_back(fp16_to_float(static_cast<uint16_t>(h)));
    return v;  // 0, the subnormals, the normals: increasing
  }();
  const double a = std::fabs(static_cast<double>(x));
  const auto it = std::upper_bound(values.begin(), values.end(), static_cast<float>(a),
                                   [](float l, float r) { return static_cast<double>(l) < static_cast<double>(r); });
  const size_t up_i = static_cast<size_t>(it - values.begin()), lo_i = up_i - 1;
  const double lo = values[lo_i], up = up_i < values.size() ? values[up_i] : 65536.0;
  const float inf = std::numeric_limits<float>::infinity();
  const float up_f = up_i < values.size() ? values[up_i] : inf;
  float r;
  if (a - lo != up - a) r = a - lo < up - a ? static_cast<float>(lo) : up_f;
  else r = (lo_i & 1u) == 0 ? static_cast<float>(lo) : up_f;  // bit pattern h = index: even h
  return std::signbit(x) ? -r : r;
}

TEST(Fp16, RoundsToNearestEvenAsDefined) {
  const RngKey k{6, static_cast<uint32_t>(RngPurpose::test), 0, 0};
  for (uint64_t i = 0; i < 200000; ++i) {
    // Exponents around fp16's range (2^-27 to 2^17: zero, subnormal, normal and overflowing
    // results), random mantissas, and every fourth an exact fp16 midpoint.
    const uint32_t w = rng_words(k, i)[0];
    const int e = static_cast<int>(w % 45) - 27;
    float x = std::ldexp(1.0f + static_cast<float>((w >> 8) & 0x7fffffu) * 0x1p-23f, e);
    if (i % 4 == 0 && std::fabs(x) < 65504.0f) {
      const float lo = reference_round_fp16(x) <= x ? reference_round_fp16(x) : x;
      const uint16_t h = float_to_fp16(lo);
      x = static_cast<float>((static_cast<double>(fp16_to_float(h)) + fp16_to_float(static_cast<uint16_t>(h + 1))) / 2);
    }
    if (w & 0x80000000u) x = -x;
    ASSERT_EQ(std::bit_cast<uint32_t>(fp16_to_float(float_to_fp16(x))), std::bit_cast<uint32_t>(reference_round_fp16(x)))
        << std::hexfloat << x;
  }
  EXPECT_EQ(fp16_to_float(float_to_fp16(65519.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(fp16_to_float(float_to_fp16(65520.0f))));  // the midpoint to 65536 rounds to even: inf
  EXPECT_EQ(fp16_to_float(float_to_fp16(0x1p-25f)), 0.0f);          // half the smallest subnormal: tie to 0
  EXPECT_EQ(fp16_to_float(float_to_fp16(0x1.8p-25f)), 0x1p-24f);
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Half, EveryValueRoundTripsExactlyInBothFormats) {
  std::vector<uint16_t> all(1 << 16), back(all.size());
  std::vector<float> wide(all.size()), rounded(all.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    cpu::half_to_f32(p, wide.data(), all.data(), static_cast<int64_t>(all.size()));
    cpu::f32_to_half(p, back.data(), wide.data(), static_cast<int64_t>(all.size()));
    cpu::round_to_half(p, rounded.data(), wide.data(), static_cast<int64_t>(all.size()));
    for (size_t i = 0; i < all.size(); ++i) {
      if (std::isnan(wide[i])) {
        EXPECT_TRUE(std::isnan(rounded[i])) << precision_name(p) << " " << i;
        continue;
      }
      ASSERT_EQ(back[i], all[i]) << precision_name(p) << " " << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(rounded[i]), std::bit_cast<uint32_t>(wide[i])) << precision_name(p) << " " << i;
    }
  }
}

TEST(Bf16, GemmIsTheFloat32ProductOfTheBf16Values) {
  using cpu::Trans;
  const RngKey k{4, static_cast<uint32_t>(RngPurpose::test), 0, 0};
  uint64_t draw = 0;
  const double u = std::ldexp(1.0, -24);
  for (Trans ta : {Trans::no, Trans::yes})
    for (Trans tb : {Trans::no, Trans::yes})
      for (int64_t M : {1, 7, 33})
        for (int64_t N : {1, 9, 65})
          for (int64_t K : {1, 5, 130}) {
            const int64_t lda = (ta == Trans::no ? K : M) + 3, ldb = (tb == Trans::no ? N : K) + 2, ldc = N + 1;
            std::vector<uint16_t> A(static_cast<size_t>((ta == Trans::no ? M : K) * lda)),
                B(static_cast<size_t>((tb == Trans::no ? K : N) * ldb));
            for (auto& x : A) x = float_to_bf16(rng_normal(k, draw++));
            for (auto& x : B) x = float_to_bf16(rng_normal(k, draw++));
            std::vector<float> C(static_cast<size_t>(M * ldc));
            for (auto& x : C) x = rng_normal(k, draw++);
            const std::vector<float> C0 = C;
            const float alpha = 1.5f, beta = 0.5f;
            cpu::gemm_bf16(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
            const auto a = [&](int64_t i, int64_t p) {
              return bf16_to_float(A[static_cast<size_t>(ta == Trans::no ? i * lda + p : p * lda + i)]);
            };
            const auto b = [&](int64_t p, int64_t j) {
              return bf16_to_float(B[static_cast<size_t>(tb == Trans::no ? p * ldb + j : j * ldb + p)]);
            };
            const double gamma = (K + 2) * u / (1 - (K + 2) * u);
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j) {
                double exact = 0.0, mag = 0.0;
                for (int64_t p = 0; p < K; ++p) {
                  exact += static_cast<double>(a(i, p)) * b(p, j);
                  mag += std::fabs(static_cast<double>(a(i, p)) * b(p, j));
                }
                const double c0 = C0[static_cast<size_t>(i * ldc + j)];
                const double want = alpha * exact + beta * c0;
                const double bound = gamma * (alpha * mag + beta * std::fabs(c0));
                ASSERT_LE(std::fabs(C[static_cast<size_t>(i * ldc + j)] - want), bound)
                    << "M " << M << " N " << N << " K " << K << " ta " << static_cast<char>(ta) << " tb "
                    << static_cast<char>(tb) << " at " << i << "," << j;
              }
          }
}

class LinearLayers : public ::testing::TestWithParam<Precision> {};

TEST_P(LinearLayers, MultiplyTheRoundedValues) {
  constexpr int64_t N = 37, C = 45, OC = 29;
  const RngKey k{5, static_cast<uint32_t>(RngPurpose::test), 0, 0};
  std::vector<float> x(N * C), w(OC * C), b(OC), dy(N * OC);
  uint64_t draw = 0;
  for (auto* v : {&x, &w, &b, &dy})
    for (float& e : *v) e = rng_normal(k, draw++);
  const Precision p = GetParam();
  const auto rounded = [p](float v) {
    return p == Precision::bf16 ? bf16_to_float(float_to_bf16(v)) : fp16_to_float(float_to_fp16(v));
  };
  const Stream bf16 = Stream::cpu(p), fp32 = Stream::cpu();
  std::vector<float> y(N * OC), y32(N * OC), dx(N * C), dw(OC * C, 0.0f), db(OC, 0.0f);
  matmul_forward(bf16, Tensor(y.data(), Shape{N, OC}), Tensor(x.data(), Shape{N, C}), Tensor(w.data(), Shape{OC, C}),
                 Tensor(b.data(), Shape{OC}));
  matmul_forward(fp32, Tensor(y32.data(), Shape{N, OC}), Tensor(x.data(), Shape{N, C}), Tensor(w.data(), Shape{OC, C}),
                 Tensor(b.data(), Shape{OC}));
  matmul_backward(bf16, Tensor(dx.data(), Shape{N, C}), Tensor(dw.data(), Shape{OC, C}), Tensor(db.data(), Shape{OC}),
                  Tensor(dy.data(), Shape{N, OC}), Tensor(x.data(), Shape{N, C}), Tensor(w.data(), Shape{OC, C}));
  const double u = std::ldexp(1.0, -24);
  // got = Σ_p l(p)·r(p) (+ extra, exact) within γ(terms + 2)·Σ|l·r| (+ |extra|).
  const auto check = [&](const char* what, float got, int terms, const auto& l, const auto& r, double extra) {
    double exact = extra, mag = std::fabs(extra);
    for (int p = 0; p < terms; ++p) {
      exact += static_cast<double>(l(p)) * r(p);
      mag += std::fabs(static_cast<double>(l(p)) * r(p));
    }
    const double gamma = (terms + 2) * u / (1 - (terms + 2) * u);
    EXPECT_LE(std::fabs(got - exact), gamma * mag) << what;
  };
  double off = 0.0;  // how far the bf16 forward is from the float32 one
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < OC; ++o) {
      check("y", y[i * OC + o], C, [&](int p) { return rounded(x[i * C + p]); },
            [&](int p) { return rounded(w[o * C + p]); }, b[o]);
      off = std::max(off, std::fabs(static_cast<double>(y[i * OC + o]) - y32[i * OC + o]));
    }
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c)
      check("dx", dx[i * C + c], OC, [&](int p) { return rounded(dy[i * OC + p]); },
            [&](int p) { return rounded(w[p * C + c]); }, 0.0);
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t c = 0; c < C; ++c)
      check("dw", dw[o * C + c], N, [&](int p) { return rounded(dy[p * OC + o]); },
            [&](int p) { return rounded(x[p * C + c]); }, 0.0);
  // bf16 keeps 8 bits, fp16 11: products of unit normals move by about 2^-8 or 2^-11 each.
  EXPECT_GT(off, p == Precision::bf16 ? 1e-3 : 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Half, LinearLayers, ::testing::Values(Precision::bf16, Precision::fp16),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

}  // namespace
}  // namespace megatrain
