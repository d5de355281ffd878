// The attention core chosen once per stage (model/attention_core.h): the only place that reads the
// context-parallel split and algorithm. Planning is a pure function of the spec (a measuring arena
// sizes the buffers, model/stage_plan.h); making the part takes the planned buffers and the group.
#pragma once
#include <memory>
#include <optional>
#include <variant>

#include "kernels/device.h"
#include "model/local_attention.h"
#include "model/ring_attention.h"
#include "model/ulysses_attention.h"

namespace megatrain {

// [Note: activation dtype] What a stage keeps the activations its GEMMs and attention read in
// (kernels/ops.h [Note: bf16 activations]): the norm outputs (the blocks' and the final one), q/k/v,
// the attention output and the MLP's hidden tensors, with the gradients the GEMMs read at q/k/v and
// the MLP's first output. bf16 on a CPU stream of bf16 precision: they are saved for backward and
// read by bf16 GEMMs, so half the bytes and no rounding pass; the ops compute in float32 and round
// each result once. The residual stream, the gradients flowing into float32 sums (norms, tp
// reductions), statistics and log-sum-exp stay f32. float32 elsewhere: fp32 and fp16 runs, CUDA
// streams (the device kernels read float32) and context parallelism (its block ops are float32),
// and where train.bf16_activations = false asks for float32 (a like-with-like reference for those).
struct ActivationDtype {
  DType dtype = DType::f32;
  const char* why = "";  // for the start-up log
};
// `cp`: the ranks holding each sequence (its block attention reads float32).
ActivationDtype activation_dtype(Precision matmul, Device device, int cp, bool bf16_activations = true);

struct AttentionSpec {
  CpSplit split;  // split.cp = 1: the rank holds whole sequences
  CpComm algorithm = CpComm::ring;
  int B = 1;
  AttnHeads heads{};
};

// The spec of a stage of B sequences of T rows each; `split`: the cp group's split of each sequence
// (split.cp = 1: the whole sequence on the rank, T of it).
AttentionSpec attention_spec(const CpSplit& split, CpComm algorithm, int B, int T, AttnHeads heads);

using AttentionBuffers = std::variant<std::monostate, RingAttention::Buffers, UlyssesAttention::Buffers>;
AttentionBuffers plan_attention(Arena& arena, const AttentionSpec& spec);
// `cp`: the group of the ranks holding each sequence (needed when spec.split.cp > 1).
std::unique_ptr<AttentionCore> make_attention(const AttentionSpec& spec, const AttentionBuffers& buffers,
                                              std::optional<Comm> cp);

}  // namespace megatrain
