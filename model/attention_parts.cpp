#include "model/attention_parts.h"

namespace megatrain {
namespace {

CpAttentionSpec cp_spec(const AttentionSpec& s) { return {s.split, s.B, s.heads}; }

}  // namespace

ActivationDtype activation_dtype(Precision matmul, Device device, int cp, bool bf16_activations) {
  if (matmul != Precision::bf16) return {DType::f32, "float32 (the precision is not bf16)"};
  if (!bf16_activations) return {DType::f32, "float32 (train.bf16_activations = false)"};
  if (device != Device::cpu) return {DType::f32, "float32 (the device kernels read float32)"};
  if (cp > 1) return {DType::f32, "float32 (context parallelism's block attention is float32)"};
  return {DType::bf16, "bf16 (norm outputs, q/k/v, attention output, MLP hidden; residual stream float32)"};
}

AttentionSpec attention_spec(const CpSplit& split, CpComm algorithm, int B, int T, AttnHeads heads) {
  if (split.cp == 1) return {CpSplit{1, 0, T}, algorithm, B, heads};
  MT_CHECK(split.local_len() == T, "a cp rank holds {} rows of each sequence, the stage was given {}",
           split.local_len(), T);
  return {split, algorithm, B, heads};
}

AttentionBuffers plan_attention(Arena& arena, const AttentionSpec& spec) {
  if (spec.split.cp == 1) return std::monostate{};
  if (spec.algorithm == CpComm::ring) return RingAttention::plan(arena, cp_spec(spec));
  return UlyssesAttention::plan(arena, cp_spec(spec));
}

std::unique_ptr<AttentionCore> make_attention(const AttentionSpec& spec, const AttentionBuffers& buffers,
                                              std::optional<Comm> cp) {
  if (spec.split.cp == 1) return std::make_unique<LocalAttention>(spec.B, spec.split.seq_len, spec.heads);
  MT_CHECK(cp.has_value(), "a context-parallel stage (cp = {}) needs its cp group", spec.split.cp);
  if (spec.algorithm == CpComm::ring)
    return std::make_unique<RingAttention>(std::move(*cp), cp_spec(spec), std::get<RingAttention::Buffers>(buffers));
  return std::make_unique<UlyssesAttention>(std::move(*cp), cp_spec(spec),
                                            std::get<UlyssesAttention::Buffers>(buffers));
}

}  // namespace megatrain
