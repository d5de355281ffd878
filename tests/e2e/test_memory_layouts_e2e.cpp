// Recovery from memory snapshots on every layout README claims (docs/robustness.md R26): under the
// resilient driver, with a snapshot every step, one rank killed (SIGKILL) at step 25 of 40; the
// relaunch must restore step 24 (or 23, when step 24's copy was still in flight) from the hosts'
// memory — a fallback to the storage checkpoint fails the test — and the run must end with the
// fault-free run's losses and every final tensor (parameters and both moments, by the manifest's
// CRC-32s) bit for bit. Layouts: MoE with ep 2 at ZeRO 1 and 3 (the dense state is sharded over
// the ep ranks too, the experts over the ranks with the same ep coordinate), pp 2 under 1F1B and
// interleaved at ZeRO 3, tp 2 × pp 2 × dp 2 on 8 ranks, bf16 and fp16 (the loss scaler's state
// with it: its scale grows every 10 steps, so a restore that lost the growth tracker shows), and
// cp 2 × ep 2.
#include <gtest/gtest.h>

#include <string>

#include "tests/e2e/resilient_fixture.h"

namespace megatrain {
namespace {

using json = nlohmann::json;

constexpr const char* kMoe = " --set train.micro_batch_size=4 --set moe.n_experts=4 --set moe.top_k=2 --set moe.d_ff_expert=64";

struct MemoryCase {
  const char* name;
  int ranks;
  std::string flags;
};

std::ostream& operator<<(std::ostream& os, const MemoryCase& c) { return os << c.name; }

const std::vector<MemoryCase> kCases = {
    {"moe_ep2_zero1", 4, std::string("--set parallel.tp=1 --set parallel.ep=2 --set parallel.zero_stage=1") + kMoe},
    {"moe_ep2_zero3", 4, std::string("--set parallel.tp=1 --set parallel.ep=2 --set parallel.zero_stage=3") + kMoe},
    {"pp2_1f1b_zero3", 4, "--set parallel.tp=1 --set parallel.pp=2 --set parallel.zero_stage=3 "
                          "--set train.micro_batch_size=4"},
    {"pp2_interleaved_zero3", 4,
     "--set parallel.tp=1 --set parallel.pp=2 --set parallel.zero_stage=3 --set train.micro_batch_size=4 "
     "--set model.n_layers=4 --set parallel.virtual_stages=2 --set parallel.pipeline_schedule='\"interleaved\"'"},
    {"tp2_pp2_dp2", 8, "--set parallel.pp=2 --set parallel.zero_stage=1 --set train.micro_batch_size=4"},
    {"bf16_zero1", 4, "--set parallel.tp=1 --set parallel.zero_stage=1 --set train.precision='\"bf16\"' --set train.micro_batch_size=4"},
    {"fp16_zero2", 4, "--set parallel.tp=1 --set parallel.zero_stage=2 --set train.precision='\"fp16\"' --set train.micro_batch_size=4 "
     "--set loss_scale.growth_interval=10"},
    {"cp2_ep2", 4,
     "--set parallel.tp=1 --set parallel.cp=2 --set parallel.ep=2 --set parallel.zero_stage=1 --set moe.n_experts=4 "
     "--set moe.top_k=2 --set moe.d_ff_expert=64"},
};

class MemoryLayoutsE2E : public test::ResilientE2E, public ::testing::WithParamInterface<MemoryCase> {};

TEST_P(MemoryLayoutsE2E, AKilledRankResumesFromMemoryWithTheFaultFreeState) {
  const MemoryCase& c = GetParam();
  ranks_ = c.ranks;
  const auto r = drive("kill:rank=1:step=25:sig=9", 40, "",
                       c.flags + " --set checkpoint.memory_dir=" + (dir_ / "shm").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const auto ev = events();
  ASSERT_EQ(of(ev, "restart").size(), 1u) << r.output;
  const auto restores = of(ev, "MEMORY_RESTORE");
  ASSERT_EQ(restores.size(), 1u) << r.output;
  EXPECT_EQ(restores[0]["source"], "memory");
  const std::string step = restores[0]["step"];
  EXPECT_TRUE(step == "24" || step == "23") << step;
  const auto recovery = of(ev, "RECOVERY");
  ASSERT_EQ(recovery.size(), 1u) << r.output;
  EXPECT_EQ(recovery[0]["source"], "memory");
  expect_state_equals_clean_run(40, clean_run(40, c.flags));
}

INSTANTIATE_TEST_SUITE_P(EveryLayout, MemoryLayoutsE2E, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace megatrain
