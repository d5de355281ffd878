// Documents packed into a training sample (data.reset_position_ids, reset_attention_mask,
// eod_mask_loss: Megatron-LM's flags and semantics, README "Documents in a sample"). A sample's
// documents are separated by the end-of-document token that preprocess appends to each: a document
// ends at its end-of-document token (inclusive) and the next one starts right after it.
#pragma once
#include <cstdint>

namespace megatrain {

// What a run does with the documents of its samples ([data] keys of the same names).
struct DocumentRules {
  int32_t eod = -1;  // data.eod_token
  bool reset_positions = false, reset_attention = false, mask_eod = false;
  bool finds_starts() const { return reset_positions || reset_attention; }
};

// starts[t] ← the first position of position t's document, for a sequence of T input tokens.
void find_document_starts(const int32_t* tokens, int T, int32_t eod, int32_t* starts);

// Megatron's loss_mask[tokens == eod] = 0: targets[i] ← `masked` where tokens[i] is the
// end-of-document token (the prediction across the boundary); n positions. Returns how many targets
// are left counted (not `masked`, before or after).
int64_t mask_eod_targets(const int32_t* tokens, int32_t* targets, int64_t n, int32_t eod, int32_t masked);

}  // namespace megatrain
