// KV-cached inference and generation: for both architecture families (GPT-2-like; Llama-like with
// RoPE and grouped-query attention), each also with an MoE block, the cached path's logits equal
// the full forward pass at every position, token by token, in chunks and in internal pieces; greedy
// decoding is deterministic and follows the full model's argmax; top-k = 1 is greedy; sampling is
// reproducible per seed, follows the softmax and honours top-k / top-p; generation stops where it
// should.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "kernels/rng.h"
#include "model/generate.h"
#include "model/gpt.h"
#include "tests/model/tiny_models.h"

namespace megatrain {
namespace {

// Larger init than the training tests: attention is then far from uniform.
ModelConfig gpt2_like() {
  ModelConfig c = test::gpt2_like();
  c.init_std = 0.3f;
  return c;
}

ModelConfig llama_like() {
  ModelConfig c = test::llama_like();
  c.init_std = 0.3f;
  return c;
}

using test::tokens;

// Logits (T, Vp) of the full forward pass over `seq` padded to max_seq_len (causal: padding does
// not change earlier positions).
std::vector<float> full_logits(const GptModel& trained, std::vector<int32_t> seq) {
  const ModelConfig& cfg = trained.config();
  const int T = cfg.max_seq_len;
  seq.resize(static_cast<size_t>(T), 0);
  GptModel m(cfg, 1, T);
  std::copy(trained.params(), trained.params() + trained.layout().total(), m.params());
  m.forward(seq.data(), seq.data(), ForwardOptions{});
  const Tensor l = m.logits();
  return std::vector<float>(l.f32(), l.f32() + l.numel());
}

// Row `got` against row `pos` of the full logits: within 1e-4 of the row's largest magnitude.
void expect_row(const float* got, const std::vector<float>& full, const ModelConfig& cfg, int pos, const char* what) {
  const float* want = full.data() + static_cast<int64_t>(pos) * cfg.padded_vocab(1);
  float scale = 0.0f;
  for (int v = 0; v < cfg.vocab_size; ++v) scale = std::max(scale, std::fabs(want[v]));
  ASSERT_GT(scale, 0.1f);
  for (int v = 0; v < cfg.vocab_size; ++v)
    ASSERT_NEAR(got[v], want[v], 1e-4f * scale) << what << ": position " << pos << " id " << v;
}

class Decode : public ::testing::TestWithParam<ModelConfig> {
 protected:
  void SetUp() override {
    cfg_ = GetParam();
    model_ = std::make_unique<GptModel>(cfg_, 1, cfg_.max_seq_len);
    model_->init(1);
    seq_ = tokens(cfg_.max_seq_len, cfg_.vocab_size, 1);
    full_ = full_logits(*model_, seq_);
  }
  ModelConfig cfg_;
  std::unique_ptr<GptModel> model_;
  std::vector<int32_t> seq_;
  std::vector<float> full_;
};

TEST_P(Decode, TokenByTokenMatchesTheFullForward) {
  GptDecoder dec(*model_);
  for (int t = 0; t < cfg_.max_seq_len; ++t) {
    const Tensor l = dec.forward(std::span<const int32_t>(&seq_[static_cast<size_t>(t)], 1));
    ASSERT_EQ(l.shape, (Shape{1, cfg_.padded_vocab(1)}));
    expect_row(l.f32(), full_, cfg_, t, "token by token");
  }
  EXPECT_EQ(dec.position(), cfg_.max_seq_len);
  EXPECT_THROW(dec.forward(std::span<const int32_t>(seq_.data(), 1)), Error);  // the cache is full
}

TEST_P(Decode, PromptChunkThenTokensMatchesTheFullForward) {
  GptDecoder dec(*model_);
  const int prompt = 6, Vp = cfg_.padded_vocab(1);
  const Tensor l = dec.forward(std::span<const int32_t>(seq_.data(), prompt));
  ASSERT_EQ(l.shape, (Shape{prompt, Vp}));
  for (int t = 0; t < prompt; ++t) expect_row(l.f32() + static_cast<int64_t>(t) * Vp, full_, cfg_, t, "prompt chunk");
  const Tensor mid = dec.forward(std::span<const int32_t>(seq_.data() + prompt, 4), LogitRows::last);
  ASSERT_EQ(mid.shape, (Shape{1, Vp}));
  expect_row(mid.f32(), full_, cfg_, prompt + 3, "middle chunk, last row");
  for (int t = prompt + 4; t < cfg_.max_seq_len; ++t)
    expect_row(dec.forward(std::span<const int32_t>(&seq_[static_cast<size_t>(t)], 1)).f32(), full_, cfg_, t,
               "tokens after the chunks");
  // reset() starts over; a small max_chunk splits one call into pieces with the same result.
  GptDecoder small(*model_, 3);
  for (int round = 0; round < 2; ++round) {
    small.reset();
    const Tensor all = small.forward(seq_);
    for (int t = 0; t < cfg_.max_seq_len; ++t)
      expect_row(all.f32() + static_cast<int64_t>(t) * Vp, full_, cfg_, t, "pieces of 3");
  }
}

TEST_P(Decode, GreedyIsDeterministicAndFollowsTheFullModel) {
  GptDecoder dec(*model_);
  GenerateOptions o;
  o.max_new_tokens = 100;
  o.sampling.temperature = 0.0f;
  const std::vector<int32_t> prompt(seq_.begin(), seq_.begin() + 3);
  std::vector<int32_t> streamed;
  const GenerateResult a = generate(dec, prompt, o, [&](int32_t t) { streamed.push_back(t); });
  const GenerateResult b = generate(dec, prompt, o);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.tokens, streamed);
  EXPECT_EQ(a.stop, StopReason::max_seq_len);
  ASSERT_EQ(a.tokens.size(), static_cast<size_t>(cfg_.max_seq_len - 3));
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), a.tokens.begin(), a.tokens.end());
  const auto full = full_logits(*model_, seq);
  for (size_t p = prompt.size(); p < seq.size(); ++p) {  // each pick is (within rounding) the argmax
    const float* row = full.data() + static_cast<int64_t>(p - 1) * cfg_.padded_vocab(1);
    const float best = *std::max_element(row, row + cfg_.vocab_size);
    EXPECT_GE(row[seq[p]], best - 1e-4f * std::fabs(best)) << "position " << p;
  }
  // top-k = 1 at any temperature and seed is greedy.
  GenerateOptions k1 = o;
  k1.sampling = {0.7f, 1, 1.0f, 3};
  EXPECT_EQ(generate(dec, prompt, k1).tokens, a.tokens);
  // Stop rules: max_new_tokens, and the stop token (not returned).
  o.max_new_tokens = 4;
  const GenerateResult four = generate(dec, prompt, o);
  EXPECT_EQ(four.stop, StopReason::max_new_tokens);
  EXPECT_EQ(four.tokens, std::vector<int32_t>(a.tokens.begin(), a.tokens.begin() + 4));
  o.stop_token = a.tokens[2];
  const GenerateResult stopped = generate(dec, prompt, o);
  EXPECT_EQ(stopped.stop, StopReason::end_of_document);
  EXPECT_LE(stopped.tokens.size(), 2u);
}

TEST_P(Decode, SamplingIsReproduciblePerSeed) {
  GptDecoder dec(*model_);
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.sampling = {1.3f, 0, 0.9f, 7};
  const std::vector<int32_t> prompt(seq_.begin(), seq_.begin() + 2);
  const auto a = generate(dec, prompt, o).tokens, b = generate(dec, prompt, o).tokens;
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 12u);
  o.sampling.seed = 8;
  EXPECT_NE(generate(dec, prompt, o).tokens, a);
  o.vocab = 5;  // only the first ids may come out
  for (int32_t t : generate(dec, prompt, o).tokens) EXPECT_LT(t, 5);
}

// MoE on either family (dropless: with a capacity, which tokens an expert keeps depends on how many
// share a forward, so a chunk would route differently from the whole sequence): block 0 MoE.
ModelConfig moe_of(ModelConfig c, RouterKind router) {
  c = test::moe_like(c, router, 0.0f);
  c.init_std = 0.3f;
  return c;
}

INSTANTIATE_TEST_SUITE_P(Families, Decode,
                         ::testing::Values(gpt2_like(), llama_like(), moe_of(gpt2_like(), RouterKind::softmax),
                                           moe_of(llama_like(), RouterKind::sigmoid)),
                         [](const auto& info) {
                           return std::string(info.index % 2 == 0 ? "gpt2" : "llama") + (info.index >= 2 ? "_moe" : "");
                         });

TEST(Sample, FollowsTheSoftmaxAndHonoursTopKAndTopP) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};  // ids 1 and 3 tie
  EXPECT_EQ(sample_token(logits, {0.0f, 0, 1.0f, 0}, 0), 1);          // greedy: lowest id of a tie
  EXPECT_EQ(sample_token(logits, {1.0f, 1, 1.0f, 0}, 0), 1);
  double z = 0;
  for (float l : logits) z += std::exp(l);
  auto histogram = [&](const SamplingOptions& o) {
    std::map<int32_t, double> h;
    const int n = 20000;
    for (int i = 0; i < n; ++i) h[sample_token(logits, o, static_cast<uint64_t>(i))] += 1.0 / n;
    return h;
  };
  const auto all = histogram({1.0f, 0, 1.0f, 11});
  for (int v = 0; v < 5; ++v) EXPECT_NEAR(all.count(v) ? all.at(v) : 0.0, std::exp(logits[v]) / z, 0.015) << v;
  const auto top2 = histogram({1.0f, 2, 1.0f, 12});
  ASSERT_EQ(top2.size(), 2u);
  EXPECT_NEAR(top2.at(1), 0.5, 0.015);
  const auto p75 = histogram({1.0f, 0, 0.75f, 13});  // 1 and 3 hold 0.79 ≥ 0.75
  EXPECT_EQ(p75.size(), 2u);
  const auto p80 = histogram({1.0f, 0, 0.8f, 14});   // needs 2 as well
  EXPECT_EQ(p80.size(), 3u);
  EXPECT_TRUE(p80.count(2));
  const auto cold = histogram({0.25f, 0, 1.0f, 15});  // low temperature: the tie dominates
  EXPECT_GT(cold.at(1) + cold.at(3), 0.97);
  EXPECT_EQ(sample_token(logits, {1.0f, 0, 1.0f, 5}, 42), sample_token(logits, {1.0f, 0, 1.0f, 5}, 42));
  EXPECT_THROW(sample_token(logits, {1.0f, 0, 1.5f, 0}, 0), Error);
}

}  // namespace
}  // namespace megatrain
