#include "model/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/rng.h"

namespace megatrain {
namespace {

// Uniform in [0, 1) with 53 random bits (a vocabulary of 10⁵ ids needs more than 24).
double uniform53(uint64_t seed, uint64_t index) {
  const RngKey key{seed, static_cast<uint32_t>(RngPurpose::sample), 0, 0};
  const auto w = rng_words(key, index);
  return (static_cast<double>(w[0] >> 5) * 67108864.0 + static_cast<double>(w[1] >> 6)) / 9007199254740992.0;
}

int32_t argmax(std::span<const float> logits) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;  // strict: ties keep the lowest id
  return static_cast<int32_t>(best);
}

}  // namespace

void sampling_options_check(const SamplingOptions& o) {
  MT_CHECK(std::isfinite(o.temperature) && o.temperature >= 0.0f, "temperature {} must be finite and ≥ 0",
           o.temperature);
  MT_CHECK(o.top_k >= 0, "top_k {} must be ≥ 0 (0 = all)", o.top_k);
  MT_CHECK(o.top_p > 0.0f && o.top_p <= 1.0f, "top_p {} must be in (0, 1]", o.top_p);
}

int32_t sample_token(std::span<const float> logits, const SamplingOptions& o, uint64_t index) {
  MT_CHECK(!logits.empty(), "no logits to sample from");
  sampling_options_check(o);
  for (size_t i = 0; i < logits.size(); ++i)
    MT_CHECK(!std::isnan(logits[i]), "logit of id {} is NaN: the model's weights are not finite", i);
  if (o.temperature == 0.0f) return argmax(logits);
  // 1. Candidates by logit, ties by id; keep the top k.
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const auto before = [&](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  const size_t k = o.top_k > 0 ? std::min(static_cast<size_t>(o.top_k), order.size()) : order.size();
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(), before);
  // 2. Softmax of logit / temperature over the candidates, in double.
  const double mx = logits[static_cast<size_t>(order[0])], inv_t = 1.0 / o.temperature;
  std::vector<double> p(k);
  double total = 0.0;
  for (size_t i = 0; i < k; ++i)
    total += (p[i] = std::exp((logits[static_cast<size_t>(order[i])] - mx) * inv_t));
  // 3. Nucleus: the shortest prefix holding ≥ top_p of the mass (at least one id).
  size_t keep = k;
  if (o.top_p < 1.0f) {
    double acc = 0.0;
    for (keep = 0; keep < k;) {
      acc += p[keep++];
      if (acc >= static_cast<double>(o.top_p) * total) break;
    }
    total = acc;
  }
  // 4. Inverse CDF at one uniform number keyed by the position.
  const double u = uniform53(o.seed, index) * total;
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return order[i];
  }
  return order[keep - 1];  // u within rounding of the total
}

GenerateResult generate(GptDecoder& dec, std::span<const int32_t> prompt, const GenerateOptions& o,
                        const std::function<void(int32_t)>& on_token) {
  const int vocab_size = dec.vocab_size();
  const int vocab = o.vocab > 0 ? o.vocab : vocab_size;
  MT_CHECK(vocab <= vocab_size, "sampling vocabulary {} exceeds model.vocab_size {}", vocab, vocab_size);
  MT_CHECK(o.max_new_tokens >= 0, "max_new_tokens {} must be ≥ 0", o.max_new_tokens);
  sampling_options_check(o.sampling);
  const int n_prompt = static_cast<int>(prompt.size());
  MT_CHECK(n_prompt > 0 && n_prompt <= dec.capacity(), "the prompt has {} tokens; it needs 1 … max_seq_len = {}",
           n_prompt, dec.capacity());
  dec.reset();
  Tensor logits = dec.forward(prompt, LogitRows::last);
  GenerateResult r;
  for (;;) {
    const int pos = n_prompt + static_cast<int>(r.tokens.size());  // position of the next token
    if (static_cast<int>(r.tokens.size()) == o.max_new_tokens) {
      r.stop = StopReason::max_new_tokens;
      break;
    }
    if (pos >= dec.capacity()) {
      r.stop = StopReason::max_seq_len;
      break;
    }
    if (!r.tokens.empty()) logits = dec.forward(std::span<const int32_t>(&r.tokens.back(), 1), LogitRows::last);
    const int32_t tok = sample_token(std::span<const float>(logits.f32(), static_cast<size_t>(vocab)), o.sampling,
                                     static_cast<uint64_t>(pos));
    if (tok == o.stop_token) {
      r.stop = StopReason::end_of_document;
      break;
    }
    r.tokens.push_back(tok);
    if (on_token) on_token(tok);
  }
  return r;
}

}  // namespace megatrain
