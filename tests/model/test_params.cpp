// Tensor-parallel parameter layouts: every rank's local view holds the global elements its spec says
// ([Note: tp slices] in model/params.h), split tensors are partitioned exactly, and initial values
// do not depend on the layout.
#include <gtest/gtest.h>

#include <map>

#include "model/params.h"
#include "tests/model/tiny_models.h"

namespace megatrain {
namespace {

// The shared tiny models (tests/model/tiny_models.h) with a vocabulary of 300, so real words lie in
// more than one tp rank's rows, and n_kv_heads chosen per test.
ModelConfig gpt2() {
  ModelConfig c = test::gpt2_like();
  c.vocab_size = 300;
  return c;
}

ModelConfig llama(int n_kv_heads) {
  ModelConfig c = test::llama_like();
  c.vocab_size = 300;
  c.n_kv_heads = n_kv_heads;
  return c;
}

// Over all tp ranks: each local element's value equals the unsplit model's at its global index, and
// each global element of a tensor is held by exactly `copies` ranks (1 if split, tp if replicated,
// tp / shards for a part with fewer shards than tp).
void expect_layouts_hold_the_unsplit_model(const ModelConfig& cfg, int tp) {
  // The unsplit model at the same padded vocabulary (the padding rows are zero either way).
  const ParamLayout whole_tp = gpt_param_layout(cfg, TpCoord{0, 1}, false);
  std::vector<float> whole(static_cast<size_t>(whole_tp.total()));
  init_params(whole_tp, whole.data(), cfg, 7);
  std::vector<std::map<int64_t, int>> held(whole_tp.size());
  for (int r = 0; r < tp; ++r) {
    const ParamLayout local = gpt_param_layout(cfg, TpCoord{r, tp}, false);
    ASSERT_EQ(local.size(), whole_tp.size());
    std::vector<float> p(static_cast<size_t>(local.total()));
    init_params(local, p.data(), cfg, 7);
    for (size_t i = 0; i < local.size(); ++i) {
      const ParamSpec& s = local.spec(i);
      ASSERT_EQ(s.name, whole_tp.spec(i).name);
      const int64_t cols = s.shape.numel() / s.shape[0];
      for (int64_t e = 0; e < local.local_shape(i).numel(); ++e) {
        const int64_t g = local.global_index(i, e);
        ++held[i][g];
        // Global rows past the unsplit model's padded vocabulary are padding: zero.
        const int64_t row = g / cols;
        const float want = row < whole_tp.spec(i).shape[0] ? whole[static_cast<size_t>(whole_tp.offset(i) + g)] : 0.0f;
        ASSERT_EQ(p[static_cast<size_t>(local.offset(i) + e)], want) << s.name << " rank " << r << " element " << e;
      }
    }
  }
  for (size_t i = 0; i < held.size(); ++i) {
    const ParamLayout local = gpt_param_layout(cfg, TpCoord{0, tp}, false);
    const ParamSpec& s = local.spec(i);
    EXPECT_EQ(static_cast<int64_t>(held[i].size()), s.shape.numel()) << s.name << ": every global element is held";
    for (const auto& [g, n] : held[i]) {
      int copies = s.split == TpSplit::replicated ? tp : 1;
      if (s.split == TpSplit::rows && !s.parts.empty()) {
        const int64_t cols = s.shape.numel() / s.shape[0];
        int64_t row = g / cols;
        for (const RowPart& part : s.parts) {
          if (row < part.rows) {
            copies = tp / part.shards;
            break;
          }
          row -= part.rows;
        }
      }
      ASSERT_EQ(n, copies) << s.name << " global element " << g;
    }
  }
}

TEST(ParamLayoutTp, GptLayoutsAtTp2And4HoldTheUnsplitModel) {
  for (int tp : {2, 4}) expect_layouts_hold_the_unsplit_model(gpt2(), tp);
}

TEST(ParamLayoutTp, LlamaKeyValueHeadsSplitOrReplicated) {
  expect_layouts_hold_the_unsplit_model(llama(2), 2);  // n_kv_heads ≥ tp: split
  expect_layouts_hold_the_unsplit_model(llama(2), 4);  // n_kv_heads < tp: each pair of ranks shares one
  expect_layouts_hold_the_unsplit_model(llama(1), 4);  // one head shared by all four
}

// Rank r's fused QKV rows are its own heads: [Q_r | K_r | V_r] — its first local row is global row
// r·(H/tp)·D, and its key rows follow its query rows.
TEST(ParamLayoutTp, FusedQkvHoldsTheRanksOwnHeads) {
  const ModelConfig cfg = llama(2);
  const int64_t D = cfg.head_dim(), C = cfg.d_model, H = cfg.n_heads, Hkv = cfg.kv_heads();
  for (int r = 0; r < 2; ++r) {
    const ParamLayout l = gpt_param_layout(cfg, TpCoord{r, 2}, false);
    const size_t qkv = l.index_of("layers.0.attn.qkv.weight");
    EXPECT_EQ(l.local_shape(qkv), (Shape{(H / 2 + 2 * Hkv / 2) * D, C}));
    EXPECT_EQ(l.global_index(qkv, 0), r * (H / 2) * D * C);
    EXPECT_EQ(l.global_index(qkv, (H / 2) * D * C), (H * D + r * (Hkv / 2) * D) * C);           // K_r
    EXPECT_EQ(l.global_index(qkv, (H / 2 + Hkv / 2) * D * C), (H * D + Hkv * D + r * D) * C);  // V_r
  }
}

// The ranges several ranks share, and which of them get partial gradients.
TEST(ParamLayoutTp, SharedRangesMarkReplicatedKeyValueHeadsAndSequenceParallelNorms) {
  const ModelConfig cfg = llama(1);
  const ParamLayout plain = gpt_param_layout(cfg, TpCoord{1, 4}, false);
  const ParamLayout sp = gpt_param_layout(cfg, TpCoord{1, 4}, true);
  int partial_kv = 0, partial_sp = 0;
  for (const SharedRange& r : plain.shared()) partial_kv += r.partial_grad ? 1 : 0;
  for (const SharedRange& r : sp.shared()) partial_sp += r.partial_grad ? 1 : 0;
  EXPECT_EQ(partial_kv, cfg.n_layers) << "the K and V rows of each layer's qkv, merged";
  EXPECT_GT(partial_sp, partial_kv) << "norm weights too under sequence parallelism";
  EXPECT_TRUE(gpt_param_layout(cfg, TpCoord{0, 1}, true).shared().empty());
}

}  // namespace
}  // namespace megatrain
