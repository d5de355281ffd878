// GptDecoder: KV-cached incremental inference over the weights of a GptModel (CPU, no dropout,
// no gradients). forward() runs n new tokens at positions [position(), position() + n): each
// block runs the training block's own sublayers (model/attention.h, model/mlp.h or model/moe.h)
// — the same projections, with the attention core replaced by one that appends its keys (after
// RoPE) and values to a per-layer cache of max_seq_len rows and attends over the cache causally —
// so a generated token costs one row of work, not a whole sequence. MoE blocks route dropless here
// (moe.capacity_factor bounds a training micro-batch). Invariant: after tokens t_0 … t_{p−1} went
// through forward() in any chunking, the logits of position i equal those of GptModel::forward
// over the same tokens (of a dropless GptModel for MoE; up to fp32 reduction order). All buffers
// are planned at construction; only the logits buffer grows.
#pragma once
#include <optional>
#include <span>
#include <vector>

#include "model/gpt.h"
#include "model/local_attention.h"

namespace megatrain {

// Which positions of a chunk get logits: all of them (scoring, tests) or the last (generation).
enum class LogitRows { all, last };

class GptDecoder {
 public:
  // `model` must outlive the decoder; its parameters are read, never written, so it can keep
  // training between calls (the cache then holds keys and values of the old weights: reset()).
  // Chunks longer than `max_chunk` tokens run in pieces; 0 = model.max_seq_len.
  explicit GptDecoder(const GptModel& model, int max_chunk = 0);

  int position() const { return pos_; }                // tokens in the cache
  int capacity() const { return cfg_.max_seq_len; }    // positions the model knows
  int vocab_size() const { return cfg_.vocab_size; }   // real ids; logits rows have padded_vocab(1)
  void reset() { pos_ = 0; }

  // Runs `tokens` (ids in [0, vocab_size)) and advances position(); throws when the cache would
  // exceed capacity(). Returns logits (n, Vp), or (1, Vp) of the last token with LogitRows::last;
  // the view stays valid until the next forward().
  Tensor forward(std::span<const int32_t> tokens, LogitRows rows = LogitRows::all);

 private:
  struct Scratch {  // R = max_chunk rows
    Tensor tokens;                 // (R) i32
    Tensor x, x_mid;               // (R, C)
    AttentionActivations attn;     // R rows; lse unused
    Tensor q;                      // (R, H·D)
    MlpActivations mlp;            // R rows
    MoeActivations moe;            // R rows, MoE models only (ep = 1)
    MoeScratch moe_scratch;
    BlockScratch block;            // proj (R, C); no sequence parallelism
    NormActivations final_norm;    // (R, C)
    std::vector<Tensor> k, v;      // per layer (max_seq_len, Hkv·D)
  };
  void plan(Arena& arena);
  // One chunk of m ≤ R tokens at position pos_; leaves the final-norm output in sc_.final_norm.out.
  void run_chunk(const int32_t* tokens, int m);
  void block(int layer, int m, const TensorParallel& rows);

  const GptModel& model_;
  ModelConfig cfg_;
  int R_;
  int pos_ = 0;
  Arena arena_;
  Scratch sc_;
  std::vector<float> logits_;
  Stream stream_ = Stream::cpu();
  std::optional<ExpertDispatch> dispatch_;  // MoE models: the local token exchange
  LocalAttention whole_;  // the sequence is on this rank (an MoE block's aux sums need nothing added)
};

}  // namespace megatrain
