// AdamW::step (optim/adamw.h) against PyTorch's documented AdamW, computed here in double:
// global-norm clipping (clip_grad_norm_: scale max/(norm + 1e-6) only when the norm exceeds max),
// decoupled weight decay by parameter group, and bias correction at every step t (three steps, so
// t > 1 is covered); the update of a ZeRO shard equals the same range of the full update; the
// 16-bit copy written in the update's pass equals the update followed by a conversion, bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "optim/adamw.h"
#include "optim/clip.h"
#include "tests/kernels/op_harness.h"
#include "tests/optim/mixed_layout.h"

namespace megatrain {
namespace {

using test::mixed_layout;

struct Reference {
  std::vector<double> p, m, v;
  int64_t t = 0;
};

// torch.optim.AdamW's step on every element of LAYOUT, after clipping by the global norm.
void reference_step(Reference& r, const ParamLayout& layout, const std::vector<float>& g, const AdamWOptions& o,
                    double lr) {
  double norm = 0;
  for (float x : g) norm += static_cast<double>(x) * x;
  norm = std::sqrt(norm);
  const double scale = o.grad_clip > 0 && norm > o.grad_clip ? o.grad_clip / (norm + 1e-6) : 1.0;
  ++r.t;
  const double bc1 = 1 - std::pow(static_cast<double>(o.beta1), static_cast<double>(r.t)),
               bc2 = 1 - std::pow(static_cast<double>(o.beta2), static_cast<double>(r.t));
  for (size_t i = 0; i < layout.size(); ++i) {
    const ParamSpec& s = layout.spec(i);
    const bool decays = s.group == ParamGroup::matrix || (s.group == ParamGroup::embedding && o.decay_embeddings) ||
                        ((s.group == ParamGroup::norm || s.group == ParamGroup::bias) && o.decay_norms_and_biases);
    for (int64_t e = 0; e < s.shape.numel(); ++e) {
      const auto k = static_cast<size_t>(layout.offset(i) + e);
      const double gk = g[k] * scale;
      if (decays) r.p[k] *= 1 - lr * o.weight_decay;
      r.m[k] = o.beta1 * r.m[k] + (1 - o.beta1) * gk;
      r.v[k] = o.beta2 * r.v[k] + (1 - o.beta2) * gk * gk;
      r.p[k] -= lr / bc1 * r.m[k] / (std::sqrt(r.v[k]) / std::sqrt(bc2) + o.eps);
    }
  }
}

void expect_close(const float* got, const std::vector<double>& want, int64_t n, double tol, const char* what,
                  int step) {
  for (int64_t k = 0; k < n; ++k)
    ASSERT_NEAR(got[k], want[static_cast<size_t>(k)], tol * (1 + std::fabs(want[static_cast<size_t>(k)])))
        << what << " element " << k << " after step " << step;
}

class AdamWGroups : public ::testing::TestWithParam<std::pair<bool, bool>> {};

TEST_P(AdamWGroups, ThreeClippedStepsMatchPyTorchsFormula) {
  const auto [decay_embeddings, decay_norms] = GetParam();
  const ParamLayout layout = mixed_layout();
  const int64_t n = layout.total();
  AdamWOptions o;
  o.weight_decay = 0.3f;
  o.grad_clip = 0.5f;
  o.decay_embeddings = decay_embeddings;
  o.decay_norms_and_biases = decay_norms;
  AdamW opt(layout, o);
  std::vector<float> p = test::randn(static_cast<size_t>(n), 50);
  Reference ref{test::to_double(p), std::vector<double>(static_cast<size_t>(n)), std::vector<double>(static_cast<size_t>(n))};
  for (int step = 1; step <= 3; ++step) {
    // Alternating scale: step 2's norm is below the clip, so it is not clipped.
    std::vector<float> g = test::randn(static_cast<size_t>(n), 60 + static_cast<uint32_t>(step), step == 2 ? 0.01f : 1.0f);
    const double lr = 0.01 * step;
    const double norm = grad_norm(Stream::cpu(), {GradPart(g.data(), n)});
    opt.step(p.data(), g.data(), static_cast<float>(lr), norm);
    reference_step(ref, layout, g, o, lr);
    ASSERT_EQ(opt.step_count(), step);
    expect_close(p.data(), ref.p, n, 2e-6, "param", step);
    expect_close(opt.exp_avg(), ref.m, n, 2e-6, "exp_avg", step);
    expect_close(opt.exp_avg_sq(), ref.v, n, 2e-6, "exp_avg_sq", step);
  }
}

INSTANTIATE_TEST_SUITE_P(DecayGroups, AdamWGroups,
                         ::testing::Values(std::pair{false, false}, std::pair{true, false}, std::pair{false, true}));

// A shard [begin, end) updated alone, clipped by the full gradient's norm, equals that range of
// the full update bitwise.
TEST(AdamWShard, UpdatesItsRangeExactlyAsTheFullOptimizer) {
  const ParamLayout layout = mixed_layout();
  const int64_t n = layout.total();
  const FlatRange shard{29, 77};
  AdamW full(layout, AdamWOptions{}), part(layout, AdamWOptions{}, shard, shard.size() + 5);
  std::vector<float> p = test::randn(static_cast<size_t>(n), 70), g = test::randn(static_cast<size_t>(n), 71);
  std::vector<float> q(p.begin() + shard.begin, p.begin() + shard.end);
  const double norm = grad_norm(Stream::cpu(), {GradPart(g.data(), n)});
  full.step(p.data(), g.data(), 0.02f, norm);
  part.step(q.data(), g.data() + shard.begin, 0.02f, norm);
  for (int64_t k = 0; k < shard.size(); ++k) ASSERT_EQ(q[static_cast<size_t>(k)], p[static_cast<size_t>(shard.begin + k)]) << k;
}

// [Note: fused 16-bit copy] (kernels/cpu/adamw.cpp) Mixed precision's copy written by AdamW's own
// pass is bitwise the old two passes — the float32 update, then every master converted — for bf16
// and fp16, over the whole layout and over a shard: the same masters, moments and 16-bit bits
// after three steps. The layout has a ParamGroup::state tensor (a router bias: AdamW leaves it
// alone, the trainer adds its own step before the update) whose copy must follow it too, and the
// parameters include values that round to ±inf and to subnormals in fp16. As in ZeroState, the
// copy starts as the masters' rounding (params_written), alignment gaps included.
TEST(AdamWSixteenBitCopy, WrittenInTheUpdatePassEqualsUpdateThenConvert) {
  const ParamLayout layout({{"wte", Shape{5, 7}, TpSplit::rows, {}, ParamGroup::embedding},
                            {"w", Shape{9, 3}, TpSplit::rows, {}, ParamGroup::matrix},
                            {"router.bias", Shape{6}, TpSplit::replicated, {}, ParamGroup::state, InitKind::zeros},
                            {"norm", Shape{11}, TpSplit::replicated, {}, ParamGroup::norm, InitKind::ones},
                            {"b", Shape{13}, TpSplit::replicated, {}, ParamGroup::bias, InitKind::zeros}},
                           TpCoord{});
  const int64_t n = layout.total(), bias_at = layout.offset(2);
  ASSERT_GT(bias_at, 29);
  ASSERT_LT(bias_at + 6, 101);  // the shard holds the bias, gaps and parts of two tensors
  const Stream S = Stream::cpu();
  for (const DType d : {DType::bf16, DType::f16})
    for (const FlatRange range : {FlatRange{0, n}, FlatRange{29, 101}}) {
      const std::string what = std::string(dtype_name(d)) + (range.begin == 0 ? " whole" : " shard");
      const int64_t k = range.size();
      AdamW fused(layout, AdamWOptions{}, range, k), two_pass(layout, AdamWOptions{}, range, k);
      std::vector<float> p = test::randn(static_cast<size_t>(n), 80);
      p[1] = 70000.0f, p[2] = -65519.0f, p[40] = 3e-7f, p[41] = -2e-5f;  // fp16: ±inf, rounds down, subnormals
      std::vector<float> q(p.begin() + range.begin, p.begin() + range.end), r = q;
      std::vector<uint16_t> c16(static_cast<size_t>(k)), r16(c16.size());
      convert(S, Tensor(c16.data(), Shape{k}, d), Tensor(q.data(), Shape{k}));
      for (int step = 1; step <= 3; ++step) {
        const std::vector<float> g = test::randn(static_cast<size_t>(n), 90 + static_cast<uint32_t>(step));
        const double norm = grad_norm(Stream::cpu(), {GradPart(g.data(), n)});
        for (int64_t e = std::max(bias_at, range.begin); e < std::min(bias_at + 6, range.end); ++e) {
          q[static_cast<size_t>(e - range.begin)] += 0.37f * static_cast<float>(step);  // the trainer's bias step
          r[static_cast<size_t>(e - range.begin)] += 0.37f * static_cast<float>(step);
        }
        fused.step(q.data(), g.data() + range.begin, 0.05f, norm, 1.0f, Tensor(c16.data(), Shape{k}, d));
        two_pass.step(r.data(), g.data() + range.begin, 0.05f, norm);
        convert(S, Tensor(r16.data(), Shape{k}, d), Tensor(r.data(), Shape{k}));
        const auto bytes = static_cast<size_t>(k) * 4;
        ASSERT_EQ(std::memcmp(q.data(), r.data(), bytes), 0) << what << " masters, step " << step;
        ASSERT_EQ(std::memcmp(fused.exp_avg(), two_pass.exp_avg(), bytes), 0) << what << " exp_avg, step " << step;
        ASSERT_EQ(std::memcmp(fused.exp_avg_sq(), two_pass.exp_avg_sq(), bytes), 0) << what << " exp_avg_sq";
        for (int64_t e = 0; e < k; ++e)
          ASSERT_EQ(c16[static_cast<size_t>(e)], r16[static_cast<size_t>(e)])
              << what << " 16-bit copy of flat element " << range.begin + e << " after step " << step;
      }
    }
}

}  // namespace
}  // namespace megatrain
