// Eight-rank compositions of three or more parallel dimensions (label mpi8: 8 MPI ranks on this
// machine's cores), each against one process — loss, gradient norm and validation loss of each of
// 10 steps within 1e-5 relative, dropout off (a context-parallel rank keys its own masks):
//   cp 2 × tp 2 (sequence parallel) × pp 2;
//   all-to-all cp 2 × tp 2 × dp 2 at ZeRO 2;
//   ring cp 2 × pp 2 × dp 2 at ZeRO 3;
//   an MoE model at cp 2 × ep 2 (dp 4, edp 2) at ZeRO 3, and at ep 2 with the
//   all-to-all expert exchange beside tensor and pipeline parallelism (tp 2 × pp 2 × dp 2);
// and a Llama-shaped model (RoPE, GQA) at cp 2 × tp 2 × pp 2.
#include <gtest/gtest.h>

#include "tests/e2e/e2e_fixture.h"

namespace megatrain {
namespace {

constexpr const char* kGpt = "--set model.dropout=0";
constexpr const char* kLlama = test::kLlamaFlags;
// The aux loss is per micro-batch: the one process takes micro-batches of the same size.
constexpr const char* kMoe =
    "--set model.dropout=0 --set moe.n_experts=4 --set moe.top_k=2 --set moe.d_ff_expert=64 "
    "--set moe.aux_loss_coef=0.01 --set train.micro_batch_size=2";

struct Composition {
  const char* name;
  const char* model;
  std::string layout;
};

std::ostream& operator<<(std::ostream& os, const Composition& c) { return os << c.name; }

const std::vector<Composition> kCompositions = {
    {"gpt_cp2_tp2_pp2", kGpt, "--set parallel.cp=2 --set parallel.tp=2 --set parallel.sequence_parallel=true "
                              "--set parallel.pp=2"},
    {"gpt_a2a_cp2_tp2_dp2_zero2", kGpt, "--set parallel.cp=2 --set parallel.cp_comm='\"all_to_all\"' "
                                        "--set parallel.tp=2 --set parallel.zero_stage=2"},
    {"gpt_cp2_pp2_dp2_zero3", kGpt, "--set parallel.cp=2 --set parallel.pp=2 --set parallel.zero_stage=3"},
    {"moe_cp2_ep2_dp4_zero3", kMoe, "--set parallel.cp=2 --set parallel.ep=2 --set parallel.zero_stage=3"},
    {"moe_tp2_ep2_pp2_dp2_zero1", kMoe, "--set parallel.tp=2 --set parallel.ep=2 --set parallel.pp=2 "
                                    "--set parallel.zero_stage=1"},
    {"llama_cp2_tp2_pp2", kLlama, "--set parallel.cp=2 --set parallel.tp=2 --set parallel.sequence_parallel=true "
                                  "--set parallel.pp=2"},
};

class CompositionE2E : public test::TrainE2E, public ::testing::WithParamInterface<Composition> {};

TEST_P(CompositionE2E, EightRanksTrainLikeOneProcess) {
  const Composition& c = GetParam();
  const auto single = train_parity(1, c.model, "single");
  ASSERT_EQ(single.size(), 12u);  // 10 steps + 2 validations
  const auto eight = train_parity(8, std::string(c.model) + " " + c.layout, c.name);
  EXPECT_EQ(test::compare_runs(single, eight, 1e-5, std::string(c.name) + " vs one process"), 10 * 2 + 2);
}

INSTANTIATE_TEST_SUITE_P(Mpi8, CompositionE2E, ::testing::ValuesIn(kCompositions),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace megatrain
