// Documents packed into samples (data.reset_position_ids, reset_attention_mask, eod_mask_loss;
// README "Documents in a sample") on every layout, against one process: loss, gradient norm and
// validation loss of each of 10 steps within 1e-5 relative (the fortunes are documents of ~150
// bytes, so a 64-token sample holds a boundary about every other time). Layouts: tp 2 with sequence
// parallelism, pp 2 under GPipe, 1F1B, interleaved and zero-bubble schedules, dp 2 at ZeRO 1, 2 and
// 3, cp 2 by ring and by all-to-all (documents crossing chunk and rank borders), an MoE model at ep 2, full
// and selective recompute, a Llama shape at tp 2 × cp 2; and bf16 and fp16 at dp 2 against the same
// precision in one process. Each key changes the losses by far more than the tolerance, and a run
// resumed from a checkpoint at step 5 continues bitwise.
#include <gtest/gtest.h>

#include "tests/e2e/e2e_fixture.h"
#include "tests/e2e/metrics_reader.h"

namespace megatrain {
namespace {
using test::TrainE2E;

constexpr const char* kDocuments =
    "--set data.eod_token=256 --set data.reset_position_ids=true --set data.reset_attention_mask=true "
    "--set data.eod_mask_loss=true ";
constexpr const char* kGpt = "--set model.dropout=0 ";
constexpr const char* kGpt4 = "--set model.dropout=0 --set model.n_layers=4 ";  // 2 virtual stages of 2 ranks
const std::string kLlama = std::string(test::kLlamaFlags) + " ";
constexpr const char* kMoe =
    "--set model.dropout=0 --set moe.n_experts=4 --set moe.top_k=2 --set moe.d_ff_expert=64 "
    "--set moe.aux_loss_coef=0.01 ";

struct Layout {
  const char* name;
  int np;
  const char* model;
  const char* flags;
};

std::ostream& operator<<(std::ostream& os, const Layout& l) { return os << l.name; }

const std::vector<Layout> kLayouts = {
    {"tp2_sp", 2, kGpt, "--set parallel.tp=2 --set parallel.sequence_parallel=true"},
    {"pp2_gpipe", 2, kGpt, "--set parallel.pp=2 --set parallel.pipeline_schedule='\"gpipe\"'"},
    {"pp2_1f1b", 2, kGpt, "--set parallel.pp=2"},
    {"pp2_interleaved", 2, kGpt4,
     "--set parallel.pp=2 --set parallel.pipeline_schedule='\"interleaved\"' --set parallel.virtual_stages=2"},
    {"pp2_zero_bubble", 2, kGpt, "--set parallel.pp=2 --set parallel.pipeline_schedule='\"zero_bubble\"'"},
    {"dp2_zero1", 2, kGpt, "--set parallel.zero_stage=1"},
    {"dp2_zero2", 2, kGpt, "--set parallel.zero_stage=2"},
    {"dp2_zero3", 2, kGpt, "--set parallel.zero_stage=3"},
    {"cp2_ring", 2, kGpt, "--set parallel.cp=2"},
    {"cp2_all_to_all", 2, kGpt, "--set parallel.cp=2 --set parallel.cp_comm='\"all_to_all\"'"},
    {"moe_ep2", 2, kMoe, "--set parallel.ep=2"},
    {"recompute_full", 1, kGpt, "--set train.recompute='\"full\"'"},
    {"recompute_selective", 1, kGpt, "--set train.recompute='\"selective\"'"},
    {"llama_tp2_cp2", 4, kLlama.c_str(), "--set parallel.tp=2 --set parallel.cp=2"},
};

class DocumentsE2E : public TrainE2E, public ::testing::WithParamInterface<Layout> {};

TEST_P(DocumentsE2E, TrainsLikeOneProcess) {
  const Layout& l = GetParam();
  const std::string model = std::string(l.model) + kDocuments;
  const auto single = train_parity(1, model, "single");
  ASSERT_EQ(single.size(), 12u);  // 10 steps + 2 validations
  const auto parallel = train_parity(l.np, model + l.flags, l.name);
  EXPECT_EQ(test::compare_runs(single, parallel, 1e-5, std::string(l.name) + " vs one process"), 10 * 2 + 2);
}

INSTANTIATE_TEST_SUITE_P(Layouts, DocumentsE2E, ::testing::ValuesIn(kLayouts),
                         [](const auto& info) { return std::string(info.param.name); });

// Like with like: bf16 and fp16 at dp 2 against the same precision in one process (the step's sums
// in another order only).
TEST_F(TrainE2E, DocumentsIn16BitTrainLikeOneProcess) {
  for (const std::string p : {"bf16", "fp16"}) {
    const std::string model = std::string(kGpt) + kDocuments + "--set train.precision='\"" + p + "\"' ";
    const auto single = train_parity(1, model, p + "_single");
    const auto dp2 = train_parity(2, model + "--set parallel.zero_stage=1", p + "_dp2");
    EXPECT_EQ(test::compare_runs(single, dp2, 1e-3, p + " dp 2 vs one process"), 10 * 2 + 2);
  }
}

// The documents matter: each of the three keys alone moves the 10th step's loss by 10× the
// tolerance above or more (at initialisation the model is near uniform and the first losses differ
// by less).
TEST_F(TrainE2E, EachDocumentKeyChangesTheLoss) {
  const auto plain = train_parity(1, kGpt, "plain");
  for (const char* key : {"reset_position_ids", "reset_attention_mask", "eod_mask_loss"}) {
    const auto with = train_parity(1, std::string(kGpt) + "--set data.eod_token=256 --set data." + key + "=true", key);
    const double a = test::metrics_field(plain, "loss", 9).at(0), b = test::metrics_field(with, "loss", 9).at(0);
    std::printf("%s: step 10 loss %.8f, without it %.8f (relative %.2e)\n", key, b, a, std::fabs(a - b) / a);
    EXPECT_GT(std::fabs(a - b), 1e-4 * std::fabs(a)) << key << " leaves the 10th loss at " << a;
  }
}

// A run resumed at step 5 from its checkpoint reads and masks the same documents: bitwise the
// uninterrupted run's losses and gradient norms.
TEST_F(TrainE2E, ResumeWithDocumentsIsBitwise) {
  expect_bitwise_resume(std::string(kGpt) + kDocuments +
                        "--set train.eval_interval=0 --set checkpoint.save_interval=5 ");
}

}  // namespace
}  // namespace megatrain
