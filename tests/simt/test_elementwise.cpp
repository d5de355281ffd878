// kernels/cuda/elementwise.cu under the host SIMT emulation against the CPU ops, bitwise: add, the
// bias added to rows, copy, scaling, dropout (the mask of a slice at any offset, vectorised or
// not) and the float32 ↔ bf16 / fp16 conversions (ties, subnormals, overflow, NaN, infinities and
// random bit patterns).
// Sizes: empty, under a float4, odd, and past one sweep of the grid (the emulated GPU's 8 blocks of
// 256 threads cover 8192 floats, so 20003 makes the grid-stride loops wrap and leaves a tail of 3);
// pointers one float off 16-byte alignment take the scalar path.
#include "tests/simt/simt.h"
// The kernels' own source, compiled here for the host.
#include "kernels/cuda/elementwise.cu"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu.h"
#include "tests/simt/against_cpu.h"

namespace megatrain {
namespace {

namespace gpu = megatrain::cuda_simt;
using test::randn;

constexpr int64_t kSizes[] = {0, 1, 7, 1030, 20003};

// Bit patterns equal (NaN-safe, and tells -0 from +0).
template <class T>
void expect_bitwise(const T* got, const T* want, int64_t n, const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t g = 0, w = 0;
    std::memcpy(&g, got + i, sizeof(T));
    std::memcpy(&w, want + i, sizeof(T));
    ASSERT_EQ(g, w) << what << " at " << i << " of " << n;
  }
}

TEST(SimtElementwise, AddCopyScaleAreBitwiseTheCpus) {
  for (int64_t n : kSizes)
    for (int shift : {0, 1}) {  // shift 1: misaligned, scalar path
      const auto a = randn(static_cast<size_t>(n) + 1, 1), b = randn(static_cast<size_t>(n) + 1, 2);
      std::vector<float> out(static_cast<size_t>(n) + 1, -7.0f), want(out);
      gpu::add_forward(nullptr, out.data() + shift, a.data() + shift, b.data() + shift, n);
      cpu::add_forward(want.data() + shift, a.data() + shift, b.data() + shift, n);
      expect_bitwise(out.data(), want.data(), n + 1, "add");  // also: nothing written outside

      std::vector<float> copied(static_cast<size_t>(n) + 1, -7.0f);
      gpu::copy(nullptr, copied.data() + shift, a.data() + shift, n);
      want.assign(static_cast<size_t>(n) + 1, -7.0f);
      std::memcpy(want.data() + shift, a.data() + shift, sizeof(float) * static_cast<size_t>(n));
      expect_bitwise(copied.data(), want.data(), n + 1, "copy");

      std::vector<float> x = a, x_cpu = a;
      gpu::scale_inplace(nullptr, x.data() + shift, n, 0.37f);
      cpu::scale_inplace(x_cpu.data() + shift, n, 0.37f);
      expect_bitwise(x.data(), x_cpu.data(), n + 1, "scale_inplace");
    }
}

// The bias of a GEMM that ran without its epilogue (kernels/cuda/gemm.cu): every row gains the
// bias, float4-wide where the width and pointers allow and one by one where not.
TEST(SimtElementwise, BiasAddAddsTheBiasToEveryRow) {
  for (const auto& [N, C] : {std::pair{0, 8}, std::pair{1, 1}, std::pair{9, 40}, std::pair{5, 7}, std::pair{3, 1030}})
    for (int shift : {0, 1}) {  // shift 1: misaligned, scalar path
      const auto bias = randn(static_cast<size_t>(C) + 1, 3);
      std::vector<float> out = randn(static_cast<size_t>(N) * C + 1, 4), want = out;
      gpu::bias_add(nullptr, out.data() + shift, bias.data() + shift, N, C);
      for (int64_t i = 0; i < int64_t{N} * C; ++i)
        want[static_cast<size_t>(i + shift)] += bias[static_cast<size_t>(i % C + shift)];
      expect_bitwise(out.data(), want.data(), int64_t{N} * C + 1, "bias_add");  // and nothing written outside
    }
}

TEST(SimtElementwise, DropoutMaskIsBitwiseTheCpus) {
  for (int64_t n : kSizes)
    for (uint64_t offset : {0ull, 3ull, 8ull, 4101ull})  // a multiple of 4 or not
      for (int shift : {0, 1})
        for (float p : {0.1f, 0.5f}) {
          const RngKey key{11, static_cast<uint32_t>(RngPurpose::dropout), 5, offset};
          const auto x0 = randn(static_cast<size_t>(n) + 1, 3);
          std::vector<float> x = x0, want = x0;
          gpu::dropout_apply(nullptr, x.data() + shift, n, p, key);
          cpu::dropout_apply(want.data() + shift, n, p, key);
          expect_bitwise(x.data(), want.data(), n + 1, "dropout");
          if (n == 20003) {  // the mask is not trivial
            const auto dropped = std::count(x.begin() + shift, x.begin() + shift + n, 0.0f);
            EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(n), p, 0.02);
          }
        }
}

// Random bit patterns (any exponent, so subnormals, huge values, NaNs and infinities) and the
// values around the rounding edges of both formats.
std::vector<float> conversion_inputs(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  const RngKey k{5, static_cast<uint32_t>(RngPurpose::test), 9, 0};
  const float special[] = {0.0f,      -0.0f,      1.0f,         65504.0f,    65519.99f,  65520.0f,
                           -65520.0f, 0x1p-24f,   0x1p-25f,     0x1.8p-25f,  0x1p-26f,   0x1p-14f,
                           0x1.ffcp-15f, 3.0e38f, -3.4e38f,     INFINITY,    -INFINITY,  NAN,
                           -NAN,      std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0xffc12345u),
                           std::bit_cast<float>(0x3f808000u),  std::bit_cast<float>(0x3f818000u)};
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t w = rng_words(k, static_cast<uint64_t>(i))[0];
    v[static_cast<size_t>(i)] = i < static_cast<int64_t>(std::size(special)) ? special[i] : std::bit_cast<float>(w);
  }
  return v;
}

TEST(SimtElementwise, ConversionsAreBitwiseTheCpus) {
  using Narrow = void (*)(cudaStream_t, uint16_t*, const float*, int64_t);
  using Widen = void (*)(cudaStream_t, float*, const uint16_t*, int64_t);
  using Round = void (*)(cudaStream_t, float*, const float*, int64_t);
  struct Format {
    Precision p;
    Narrow narrow;
    Widen widen;
    Round round;
  };
  for (const Format& f : {Format{Precision::bf16, gpu::f32_to_bf16, gpu::bf16_to_f32, gpu::round_to_bf16},
                          Format{Precision::fp16, gpu::f32_to_fp16, gpu::fp16_to_f32, gpu::round_to_fp16}})
    for (int64_t n : kSizes)
      for (int shift : {0, 1}) {
        const size_t m = static_cast<size_t>(n) + 1;
        const auto x = conversion_inputs(n + 1);
        std::vector<uint16_t> h(m, 0xabcd), want_h(m, 0xabcd);
        f.narrow(nullptr, h.data() + shift, x.data() + shift, n);
        cpu::f32_to_half(f.p, want_h.data() + shift, x.data() + shift, n);
        ASSERT_EQ(h, want_h) << "to " << precision_name(f.p) << " n=" << n;

        // Back, from n bit patterns spread over all 65536.
        std::vector<uint16_t> bits(m);
        for (size_t i = 0; i < m; ++i) bits[i] = static_cast<uint16_t>(i * 40503u);
        std::vector<float> w(m, -7.0f), want_w(m, -7.0f);
        f.widen(nullptr, w.data() + shift, bits.data() + shift, n);
        cpu::half_to_f32(f.p, want_w.data() + shift, bits.data() + shift, n);
        expect_bitwise(w.data(), want_w.data(), n + 1, "widen");

        std::vector<float> r = x, want_r = x;
        f.round(nullptr, r.data() + shift, r.data() + shift, n);  // in place
        cpu::round_to_half(f.p, want_r.data() + shift, x.data() + shift, n);
        expect_bitwise(r.data(), want_r.data(), n + 1, "round_to_half");
      }
}

}  // namespace
}  // namespace megatrain
