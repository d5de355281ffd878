// Tensor and sequence parallelism end to end: every (tp, dp, zero, sequence_parallel) layout of a
// GPT-2 and a Llama-style model (GQA with key/value heads split at tp = 2 and replicated at tp = 4)
// trains like one process — loss and gradient norm of each of 10 steps within 1e-5 relative, with
// dropout on, so the masks are those of the single process too — and a layout run twice is bitwise
// identical.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/e2e/e2e_fixture.h"

namespace megatrain {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

// Llama-style: RMSNorm, RoPE, SwiGLU, no biases, untied head, 2 key/value heads for 4 query heads.
constexpr const char* kLlama =
    "--set model.norm='\"rmsnorm\"' --set model.position='\"rope\"' --set model.activation='\"swiglu\"' "
    "--set model.bias=false --set model.tie_embeddings=false --set model.n_kv_heads=2";

class TpE2E : public test::TrainE2E {
 protected:
  // tp·dp ranks (one thread each) on the tiny config for 10 steps: micro-batches of 4 from a global
  // batch of 16; validation after step 5 and 10.
  std::vector<json> run(int tp, int dp, const std::string& extra, const std::string& name) {
    const fs::path metrics = dir_ / (name + ".jsonl");
    const std::string cmd = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np " +
                            std::to_string(tp * dp) + " -x OMP_NUM_THREADS=1 " + test::megatrain_bin() +
                            " train --config " + config_.string() +
                            " --set train.steps=10 --set train.micro_batch_size=4 --set train.eval_interval=5 "
                            "--set parallel.bucket_size_mb=0.05 --set parallel.tp=" + std::to_string(tp) +
                            " --set log.metrics_file=" + metrics.string() + " " + extra;
    const auto r = test::run_shell(cmd);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.output;
    return test::metrics_lines(metrics);
  }

  // Every layout at this tp against one process; the first layout again, bitwise.
  void every_layout_matches_one_process(int tp, const std::string& model) {
    const auto single = run(1, 1, model, "single");
    ASSERT_EQ(single.size(), 12u);  // 10 steps + 2 validations
    for (int dp : {1, 2})
      for (int stage : {0, 1, 3})
        for (bool sp : {false, true}) {
          const std::string name = fmt::format("tp{}_dp{}_zero{}_sp{}", tp, dp, stage, sp);
          const std::string set =
              fmt::format("{} --set parallel.zero_stage={} --set parallel.sequence_parallel={}", model, stage, sp);
          const auto a = run(tp, dp, set, name);
          EXPECT_EQ(test::compare_runs(single, a, 1e-5, name + " vs one process"), 10 * 2 + 2);
          for (const char* k : {"tp_comm_ms", "tp_exposed_ms"}) EXPECT_TRUE(!a.empty() && a[0].contains(k)) << k;
          if (dp == 1 && stage == 0) {
            EXPECT_EQ(test::compare_runs(a, run(tp, dp, set, name + "_again"), 0.0, name + " rerun"), 22);
          }
        }
  }
};

TEST_F(TpE2E, Gpt2AtTp2) { every_layout_matches_one_process(2, ""); }
TEST_F(TpE2E, Gpt2AtTp4) { every_layout_matches_one_process(4, ""); }
TEST_F(TpE2E, LlamaAtTp2SplitsKeyValueHeads) { every_layout_matches_one_process(2, kLlama); }
TEST_F(TpE2E, LlamaAtTp4ReplicatesKeyValueHeads) { every_layout_matches_one_process(4, kLlama); }

// Overlapping the input-gradient reduction with the weight-gradient GEMM changes when the reduction
// is waited for, never what it computes.
TEST_F(TpE2E, OverlapOffGivesTheSameLosses) {
  const auto on = run(2, 1, "", "on");
  const auto off = run(2, 1, "--set parallel.overlap_tp_comm=false", "off");
  EXPECT_EQ(test::compare_runs(on, off, 0.0, "tp overlap off"), 22);
}

}  // namespace
}  // namespace megatrain
