// The planner's memory per rank (planner/plan_memory.h) against what runs at the same layouts
// account: for each layout of the tiny model, one training step on MPI ranks, and rank 0's
// metrics memory_bytes (pipeline rank 0) compared buffer by buffer with plan_memory(config, 0).
// And the CPU profile: `megatrain selfcheck --profile-out` measures it on the ranks a run would use
// and `megatrain plan --gpu cpu --profile` plans with it.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "config/config.h"
#include "planner/plan_memory.h"
#include "planner/plan_profile.h"
#include "tests/e2e/e2e_fixture.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {
using json = nlohmann::json;

struct Layout {
  int np;
  std::vector<std::string> sets;
};

class PlanE2E : public test::TrainE2E {
 protected:
  // The run's rank-0 memory_bytes after one step, and the plan of the same config.
  std::pair<json, PlannedMemory> both(const Layout& l, const std::string& name) {
    std::vector<std::string> sets = l.sets;
    for (const char* s : {"train.steps=1", "optimizer.warmup_steps=0", "train.micro_batch_size=4", "train.eval_interval=0",
                          "parallel.bucket_size_mb=0.05"})
      sets.emplace_back(s);
    std::string flags;
    for (const std::string& s : sets) flags += " --set " + s;
    const std::vector<json> lines = train_mpi(l.np, flags, name);
    EXPECT_FALSE(lines.empty()) << name;
    Config c = load_config(config_.string(), sets);
    resolve_config(c, l.np);
    return {lines.empty() ? json{} : lines[0]["memory_bytes"], plan_memory(c, 0)};
  }
};

// Within 5 % for every buffer (exact for all but the working buffers whose peak depends on the
// order a step frees them in), over data, tensor and pipeline parallelism, ZeRO 0–3, recompute,
// zero-bubble's split backward, 16-bit parameters, expert parallelism (MoE, ep = 2), ZeRO++ (qwZ at stage 1; qwZ, qgZ and hpZ
// together at stage 3) and bf16 optimizer states.
TEST_F(PlanE2E, PredictedMemoryMatchesWhatRunsAccount) {
  const std::vector<Layout> layouts = {
      {1, {}},
      {2, {"parallel.zero_stage=1"}},
      {2, {"parallel.zero_stage=2"}},
      {4, {"parallel.zero_stage=3"}},
      {2, {"parallel.tp=2", "parallel.sequence_parallel=true"}},
      {2, {"parallel.pp=2"}},
      {2, {"parallel.pp=2", "parallel.pipeline_schedule=zero_bubble"}},
      {1, {"train.recompute=full"}},
      {4, {"parallel.tp=2", "parallel.zero_stage=3", "train.recompute=selective"}},
      {2, {"parallel.zero_stage=3", "train.precision=bf16"}},
      {2, {"moe.n_experts=4", "moe.top_k=2", "parallel.ep=2", "parallel.zero_stage=2"}},
      {2, {"parallel.zero_stage=1", "parallel.zero_quantized_weights=true"}},
      {2, {"parallel.zero_stage=1", "optimizer.state_dtype=bf16"}},
      {1, {"train.precision=bf16", "optimizer.state_dtype=bf16"}},
      {4,
       {"parallel.zero_stage=3", "parallel.zero_quantized_weights=true", "parallel.zero_quantized_gradients=true",
        "parallel.zero_hpz_partition_size=2"}},
  };
  int exact = 0;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const std::string name = fmt::format("layout{}", i);
    const auto [measured, planned] = both(layouts[i], name);
    ASSERT_TRUE(measured.is_object()) << name;
    const MemoryMetrics& p = planned.bytes;
    const std::pair<const char*, int64_t> buffers[] = {{"params", p.params},       {"master_params", p.master_params},
                                                      {"grads", p.grads},         {"optimizer", p.optimizer},
                                                      {"activations", p.activations}, {"comm_buffers", p.comm_buffers}};
    int64_t total = 0;
    for (const auto& [key, predicted] : buffers) {
      const auto actual = measured[key].get<int64_t>();
      total += actual;
      exact += predicted == actual ? 1 : 0;
      EXPECT_NEAR(static_cast<double>(predicted), static_cast<double>(actual), 0.05 * static_cast<double>(actual))
          << name << " " << key;
    }
    EXPECT_NEAR(static_cast<double>(planned.total()), static_cast<double>(total), 0.05 * static_cast<double>(total))
        << name;
  }
  RecordProperty("exact_buffers", exact);
}

TEST_F(PlanE2E, TheSelfCheckMeasuresTheProfileThePlannerUses) {
  const std::filesystem::path profile = dir_ / "cpu.toml";
  const auto r = test::run_shell("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe "
                                 "-np 2 -x OMP_NUM_THREADS=1 " + test::megatrain_bin() + " selfcheck --config " +
                                 config_.string() + " --profile-out " + profile.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "selfcheck passed");
  EXPECT_CONTAINS(r.output, "selfcheck profile    written to " + profile.string());
  const DeviceProfile d = load_profile(profile.string());
  EXPECT_EQ(d.devices_per_node, 2);
  EXPECT_EQ(d.threads, 1);
  EXPECT_GT(d.cores, 0);
  EXPECT_GT(d.peak_tflops, 0.0);
  EXPECT_GT(d.efficiency, 0.0);
  const auto plan = test::run_megatrain("plan --config " + config_.string() + " --gpus 2 --gpu cpu --profile " +
                                        profile.string());
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_CONTAINS(plan.output, "tokens/s");

  const auto no_config = test::run_megatrain("selfcheck --profile-out " + profile.string());
  EXPECT_NE(no_config.code, 0);
  EXPECT_CONTAINS(no_config.output, "name its config with --config X.toml");
}

}  // namespace
}  // namespace megatrain
