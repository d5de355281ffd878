// Whole-model tests: directional finite-difference gradient check of every parameter tensor for
// both architecture families, overfitting one batch, determinism, and the padded-vocab contract.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/rng.h"
#include "model/flops.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "tests/model/tiny_models.h"

namespace megatrain {
namespace {

using test::gpt2_like;
using test::llama_like;
using test::tokens;

ForwardOptions training(int B, int T) {
  ForwardOptions o;
  o.grad = LossGrad::in_place;
  o.dloss_scale = 1.0f / static_cast<float>(B * T);
  o.dropout = true;
  o.dropout_seed = 5;
  o.first_sample = 3;
  return o;
}

class GradCheck : public ::testing::TestWithParam<ModelConfig> {};

TEST_P(GradCheck, EveryTensorMatchesDirectionalFiniteDifferences) {
  const ModelConfig cfg = GetParam();
  const int B = 2, T = 9;
  GptModel model(cfg, B, T);
  model.init(1);
  const auto in = tokens(B * T, cfg.vocab_size, 1), tg = tokens(B * T, cfg.vocab_size, 2);
  // The objective: the mean token loss plus, in MoE blocks, the coefficients times the aux and z
  // losses (their gradient scale is dloss_scale·B·T = 1).
  const auto objective = [&] {
    model.stage().moe_stats().reset();
    double f = model.forward(in.data(), tg.data(), training(B, T));
    for (const MoeLayerStats& m : model.stage().moe_stats().layers()) f += cfg.moe.aux_loss_coef * m.aux + cfg.moe.z_loss_coef * m.z;
    return f;
  };
  model.zero_grads();
  objective();
  model.backward();
  std::vector<float> grads(model.grads(), model.grads() + model.layout().total());
  const auto& layout = model.layout();
  for (size_t p = 0; p < layout.size(); ++p) {
    if (layout.spec(p).group == ParamGroup::state) continue;  // set by a rule, not by gradients
    const int64_t n = layout.spec(p).shape.numel(), off = layout.offset(p);
    std::vector<float> dir(static_cast<size_t>(n));
    const RngKey k{3, static_cast<uint32_t>(RngPurpose::test), static_cast<uint32_t>(p), 0};
    double norm = 0;
    for (int64_t i = 0; i < n; ++i) norm += std::pow(dir[static_cast<size_t>(i)] = rng_normal(k, i), 2);
    const int valid = layout.spec(p).valid_rows;
    const int64_t valid_n = valid < 0 ? n : valid * (n / layout.spec(p).shape[0]);
    double analytic = 0;
    for (int64_t i = 0; i < n; ++i) {
      dir[static_cast<size_t>(i)] = i < valid_n ? static_cast<float>(dir[static_cast<size_t>(i)] / std::sqrt(norm)) : 0;
      analytic += static_cast<double>(grads[static_cast<size_t>(off + i)]) * dir[static_cast<size_t>(i)];
    }
    const float eps = cfg.moe.enabled() ? 2e-3f : 1e-2f;  // MoE: small enough that no token changes experts
    std::vector<float> saved(model.params() + off, model.params() + off + n);
    auto loss_at = [&](float t) {
      for (int64_t i = 0; i < n; ++i) model.params()[off + i] = saved[static_cast<size_t>(i)] + t * dir[static_cast<size_t>(i)];
      return objective();
    };
    const double fd = (loss_at(eps) - loss_at(-eps)) / (2.0 * eps);
    std::memcpy(model.params() + off, saved.data(), sizeof(float) * static_cast<size_t>(n));
    EXPECT_NEAR(analytic, fd, 2e-4 + 3e-2 * std::fabs(fd)) << layout.spec(p).name;
  }
}

std::string family_name(const ::testing::TestParamInfo<ModelConfig>& info) {
  static const char* names[] = {"gpt2",           "llama",         "moe_gpt2_softmax", "moe_llama_sigmoid",
                                "moe_gpt2_capacity", "moe_llama_capacity", "moe_gpt2_shared", "moe_llama_residual"};
  return names[info.index];
}

INSTANTIATE_TEST_SUITE_P(Families, GradCheck,
                         ::testing::Values(gpt2_like(), llama_like(),
                                           test::moe_like(gpt2_like(), RouterKind::softmax, 0.0f),
                                           test::moe_like(llama_like(), RouterKind::sigmoid, 0.0f),
                                           test::moe_like(gpt2_like(), RouterKind::sigmoid, 1.0f),
                                           test::moe_like(llama_like(), RouterKind::softmax, 1.0f),
                                           test::moe_branch_like(gpt2_like(), 2), test::moe_branch_like(llama_like(), 0)),
                         family_name);

TEST(Gpt, PaddedVocabRowsStayZeroAndLayoutIsAligned) {
  const ModelConfig cfg = gpt2_like();
  EXPECT_EQ(cfg.padded_vocab(1), 128);
  GptModel model(cfg, 1, 4);
  model.init(7);
  const auto& layout = model.layout();
  const size_t wte = layout.index_of("embed.wte");
  for (int64_t i = cfg.vocab_size * cfg.d_model; i < 128 * cfg.d_model; ++i)
    ASSERT_EQ(model.params()[layout.offset(wte) + i], 0.0f);
  for (size_t p = 0; p < layout.size(); ++p) EXPECT_EQ(layout.offset(p) % 16, 0) << layout.spec(p).name;
}

// Trains on one fixed batch; returns the loss sequence.
std::vector<float> overfit(const ModelConfig& cfg, int steps) {
  const int B = 4, T = 16;
  GptModel model(cfg, B, T);
  model.init(11);
  AdamWOptions o;
  o.weight_decay = 0.0f;
  AdamW opt(model.layout(), o);
  const auto in = tokens(B * T, cfg.vocab_size, 3), tg = tokens(B * T, cfg.vocab_size, 4);
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    model.zero_grads();
    losses.push_back(model.forward(in.data(), tg.data(), training(B, T)));
    model.backward();
    const double norm = grad_norm(Stream::cpu(), {GradPart(model.grads(), model.layout().total())});
    opt.step(model.params(), model.grads(), 3e-3f, norm);
  }
  return losses;
}

TEST(Gpt, OverfitsOneBatch) {
  ModelConfig cfg = llama_like();
  cfg.d_model = 64;
  cfg.n_heads = 4;
  cfg.n_kv_heads = 4;
  cfg.vocab_size = 64;
  const auto losses = overfit(cfg, 300);
  EXPECT_GT(losses.front(), 3.5f);
  EXPECT_LT(losses.back(), 0.05f);
}

TEST(Gpt, SameSeedGivesBitwiseIdenticalLosses) {
  ModelConfig cfg = gpt2_like();
  const auto a = overfit(cfg, 5), b = overfit(cfg, 5);
  EXPECT_EQ(a, b);
}

TEST(Gpt, FlopsPerTokenCountsMatmulsAndCausalAttention) {
  ModelConfig cfg;  // GPT-2 124M shape
  cfg.n_layers = 12;
  cfg.d_model = 768;
  cfg.n_heads = 12;
  cfg.vocab_size = 50257;
  cfg.max_seq_len = 1024;
  // 12 layers · 12·C² weights in matmuls + the 50304 × 768 head, 6 FLOPs each;
  // attention 6·T·C per layer (causal-halved 12·T·C).
  const double want = 6.0 * (12.0 * 12 * 768 * 768 + 50304.0 * 768) + 12.0 * 6 * 1024 * 768;
  EXPECT_DOUBLE_EQ(model_flops_per_token(cfg, 1024), want);
}

}  // namespace
}  // namespace megatrain
