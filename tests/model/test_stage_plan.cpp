// A stage's activation plan (model/stage_plan.h) as a pure function of shapes: what each item says
// it holds is what it holds — a slot's items are what another slot adds, full recompute keeps no
// block's activations but one shared set, the attention parts' buffers are what their algorithms
// hold (counted here from model/ring_attention.h and model/ulysses_attention.h, not from the code
// that allocates them) — and planning a context-parallel stage needs no communicator, while making
// its attention part without one is refused naming what is missing. A stage allocates exactly its plan.
#include <gtest/gtest.h>

#include <string>

#include <fmt/format.h>

#include "kernels/flat_buffer.h"
#include "model/stage.h"
#include "tests/expect_contains.h"
#include "tests/model/tiny_models.h"

namespace megatrain {
namespace {

constexpr int kB = 2, kT = 8;

StageSpec spec_of(const ModelConfig& cfg, StageOptions options, StageRange range, CpSplit split = {},
                  CpComm algo = CpComm::ring) {
  const int T = split.cp == 1 ? kT : split.local_len();
  return stage_spec(cfg, kB, T, range, options, TpShape(int64_t{kB} * T, cfg.d_model), 1, split, algo);
}

size_t items_with(const StagePlan& p, const std::string& text) {
  size_t bytes = 0;
  for (const StagePlanItem& i : p.items)
    if (i.what.find(text) != std::string::npos) bytes += i.bytes;
  return bytes;
}

size_t count_with(const StagePlan& p, const std::string& text) {
  size_t n = 0;
  for (const StagePlanItem& i : p.items) n += i.what.find(text) != std::string::npos;
  return n;
}

TEST(StagePlan, ItemsAddUpAndASlotIsWhatAnotherSlotAdds) {
  for (const ModelConfig& cfg : {test::gpt2_like(), test::llama_like()}) {
    const StagePlan one = plan_stage(spec_of(cfg, StageOptions{1}, whole_model(cfg)));
    const StagePlan three = plan_stage(spec_of(cfg, StageOptions{3}, whole_model(cfg)));
    size_t sum = 0;
    for (const StagePlanItem& i : one.items) sum += i.bytes;
    EXPECT_EQ(one.bytes, Arena::aligned(sum));
    EXPECT_GT(items_with(one, "slot 0:"), 0u);
    EXPECT_EQ(three.bytes - one.bytes, 2 * items_with(one, "slot 0:"));
    EXPECT_EQ(items_with(three, "slot 2:"), items_with(one, "slot 0:"));
    EXPECT_EQ(count_with(one, "saved for backward"), static_cast<size_t>(cfg.n_layers));
  }
}

TEST(StagePlan, FullRecomputeKeepsOneSharedBlockInsteadOfEachBlocks) {
  const ModelConfig cfg = test::gpt2_like();
  StageOptions none{2}, full{2}, first{2};
  full.recompute = first.recompute = Recompute::full;
  first.recompute_layers = 1;
  const StagePlan a = plan_stage(spec_of(cfg, none, whole_model(cfg)));
  const StagePlan b = plan_stage(spec_of(cfg, full, whole_model(cfg)));
  const StagePlan c = plan_stage(spec_of(cfg, first, whole_model(cfg)));
  EXPECT_EQ(count_with(b, "saved for backward"), 0u);
  EXPECT_EQ(count_with(c, "saved for backward"), 2u);  // layer 1 in each of the two slots
  EXPECT_EQ(count_with(c, "layer 0 saved"), 0u);
  const size_t block = items_with(a, "slot 0: layer 0 saved");
  EXPECT_EQ(items_with(b, "full recompute"), block + Arena::aligned(size_t{kB} * kT * cfg.d_model * 4));
  EXPECT_EQ(a.bytes - b.bytes, 2 * static_cast<size_t>(cfg.n_layers) * block - items_with(b, "full recompute"));
}

TEST(StagePlan, TheAttentionPartsHoldWhatTheirAlgorithmsNeedWithoutACommunicator) {
  const ModelConfig cfg = test::llama_like();  // 4 heads, 2 key/value heads, head_dim 4
  const int64_t H = cfg.n_heads, Hkv = cfg.kv_heads(), D = cfg.head_dim();
  const auto bytes = [](int64_t floats) { return Arena::aligned(static_cast<size_t>(floats) * 4); };
  for (int cp : {2, 4}) {
    const CpSplit split{cp, 1, 16};
    const int64_t B = kB, Tl = split.local_len(), T = split.seq_len;
    // Ring: two key/value blocks in flight, two gradient sums, the incoming sum, a block's output and lse.
    const size_t ring = 5 * bytes(B * Tl * 2 * Hkv * D) + bytes(B * Tl * H * D) + bytes(B * H * Tl);
    // Ulysses: send and receive of all local q/k/v, this rank's heads of the whole sequence for
    // q/k/v and their gradient, for the output and its gradient.
    const size_t ulysses = 2 * bytes(B * Tl * (H + 2 * Hkv) * D) + 2 * bytes(B * T * (H + 2 * Hkv) / cp * D) +
                           2 * bytes(B * T * H / cp * D);
    const StageSpec r = spec_of(cfg, StageOptions{}, whole_model(cfg), split, CpComm::ring);
    const StageSpec u = spec_of(cfg, StageOptions{}, whole_model(cfg), split, CpComm::all_to_all);
    EXPECT_EQ(items_with(plan_stage(r), "attention part"), ring) << "cp " << cp;
    EXPECT_EQ(items_with(plan_stage(u), "attention part"), ulysses) << "cp " << cp;
    Arena measure = Arena::measuring();
    const AttentionBuffers buffers = plan_attention(measure, r.attention);
    try {
      make_attention(r.attention, buffers, std::nullopt);
      ADD_FAILURE() << "a cp part was made without its group";
    } catch (const Error& e) {
      EXPECT_CONTAINS(e.what(), fmt::format("a context-parallel stage (cp = {}) needs its cp group", cp));
    }
  }
  EXPECT_EQ(items_with(plan_stage(spec_of(cfg, StageOptions{}, whole_model(cfg))), "attention part"), 0u);
}

TEST(StagePlan, AStageAllocatesItsPlan) {
  const ModelConfig cfg = test::moe_like(test::gpt2_like(), RouterKind::softmax, 0.0f);
  StageOptions options{2, true};
  const StageRange range = whole_model(cfg);
  const ParamLayout layout = gpt_param_layout(cfg, TpCoord{}, false, range);
  FlatBuffer params(layout.total()), grads(layout.total());
  FullState state(gpt_param_units(layout, range), params.data(), grads.data());
  FullState experts(moe_expert_units(layout, {range}), params.data(), grads.data());
  const Stage stage(cfg, kB, kT, layout, range, options, state, TensorParallel(int64_t{kB} * kT, cfg.d_model),
                    StageExperts{&experts, {}});
  const StagePlan plan = plan_stage(spec_of(cfg, options, range));
  EXPECT_EQ(stage.activation_bytes(), plan.bytes);
  EXPECT_GT(items_with(plan, "MoE token exchange"), 0u);
  EXPECT_EQ(count_with(plan, "split backward"), 2u);
}

}  // namespace
}  // namespace megatrain
