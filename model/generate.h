// Text generation over a GptDecoder: choosing the next token from logits (greedy, temperature,
// top-k, top-p) and the decoding loop with its stop rules. Invariant: the output is a pure
// function of (weights, prompt, options) — a sampled token draws its one uniform number from the
// counter-based generator keyed by (seed, RngPurpose::sample, the token's position), so the same
// seed gives the same text however often and wherever it runs. The model knows nothing of
// tokenizers: the caller passes the end-of-document id and the number of real vocabulary ids.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/kv_cache.h"

namespace megatrain {

struct SamplingOptions {
  float temperature = 1.0f;  // 0 = greedy: the most likely id, ties → the lowest id
  int top_k = 0;             // keep the k most likely ids; 0 = all
  float top_p = 1.0f;        // then the smallest prefix of them holding ≥ top_p of their mass; in (0, 1]
  uint64_t seed = 0;
};

// Rejects options out of range (temperature < 0 or not finite, top_k < 0, top_p outside (0, 1]).
void sampling_options_check(const SamplingOptions& o);

// A token id in [0, logits.size()) drawn from softmax(logits / temperature) restricted by top-k
// and top-p (renormalised), with the uniform number keyed by `index`. Candidates are ordered by
// logit, ties by id, so top_k = 1 always gives the greedy choice.
int32_t sample_token(std::span<const float> logits, const SamplingOptions& o, uint64_t index);

enum class StopReason { max_new_tokens, end_of_document, max_seq_len };

struct GenerateOptions {
  int max_new_tokens = 100;
  int32_t stop_token = -1;  // generating it ends the text (it is not returned); −1 = none
  int vocab = 0;            // sample ids in [0, vocab); 0 = model.vocab_size (never the padding)
  SamplingOptions sampling;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // the new tokens, without the prompt and without stop_token
  StopReason stop = StopReason::max_new_tokens;
};

// Resets `dec`, runs the prompt (1 … max_seq_len tokens) as one chunk, then samples one token at
// a time; `on_token` (optional) sees each new token as soon as it exists. The sequence never
// grows past model.max_seq_len tokens (prompt included).
GenerateResult generate(GptDecoder& dec, std::span<const int32_t> prompt, const GenerateOptions& o,
                        const std::function<void(int32_t)>& on_token = {});

}  // namespace megatrain
