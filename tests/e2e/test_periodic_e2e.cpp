// Every periodic action of a run fires inside a short one, on every layout README claims (issue:
// an MoE run on two data-parallel ranks crashed at its first replica check, step 1000, because no
// test ran that long). 24 steps on 4 ranks, with each action's interval cut so that it fires
// several times: the replica check every 4 steps, a storage save every 8, a memory snapshot every
// 2, a validation every 6, straggler windows of 4 steps (rank 3 sleeps 200 ms a step from step 2,
// so a STRAGGLER line must name it), link probes every 4 steps, and the loss-spike window (a loss
// 50× larger at step 14 must be a LOSS_SPIKE). Each layout must end with exit 0 and show each
// action: the replica check's start-up line says what it compares (an MoE model's experts over
// their expert-data-parallel ranks, or why not), the three saves, the snapshots' count, the four
// validations, the straggler and the spike. Then a bit flipped in one rank's expert tensor is
// found by the replica check across the two ranks that hold those experts (ep 2, edp 2).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "tests/e2e/e2e_fixture.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {
namespace fs = std::filesystem;

constexpr const char* kMoe = "--set moe.n_experts=4 --set moe.top_k=2 --set moe.d_ff_expert=64";

struct PeriodicCase {
  const char* name;
  std::string flags;
  // What the replica check's start-up line must say (after "replica check every 4 steps: ").
  std::string replicas;
};

std::ostream& operator<<(std::ostream& os, const PeriodicCase& c) { return os << c.name; }

const std::vector<PeriodicCase> kCases = {
    {"dp4_zero1", "--set parallel.zero_stage=1", "the dense parameters compared over 4 replicas"},
    {"dp4_zero2", "--set parallel.zero_stage=2", "the dense parameters compared over 4 replicas"},
    {"dp4_zero3", "--set parallel.zero_stage=3",
     "the dense parameters not compared: at ZeRO stage 3 with fp32 parameters their replicas hold different "
     "parts of them"},
    {"tp2_sp_dp2", "--set parallel.tp=2 --set parallel.sequence_parallel=true --set parallel.zero_stage=1",
     "the dense parameters compared over 2 replicas"},
    {"pp2_1f1b_dp2", "--set parallel.pp=2 --set train.micro_batch_size=4 --set parallel.zero_stage=2",
     "the dense parameters compared over 2 replicas"},
    {"pp2_interleaved_dp2",
     "--set model.n_layers=4 --set parallel.pp=2 --set parallel.virtual_stages=2 --set train.micro_batch_size=4 "
     "--set parallel.pipeline_schedule='\"interleaved\"'",
     "the dense parameters compared over 2 replicas"},
    {"cp2_ring_dp2", "--set parallel.cp=2 --set parallel.zero_stage=1",
     "the dense parameters compared over 4 replicas"},
    {"cp2_all_to_all_dp2", "--set parallel.cp=2 --set parallel.cp_comm='\"all_to_all\"' --set parallel.zero_stage=2",
     "the dense parameters compared over 4 replicas"},
    {"moe_ep1_dp4", std::string(kMoe) + " --set parallel.zero_stage=1",
     "the dense parameters compared over 4 replicas; the experts compared over 4 replicas"},
    {"moe_ep2_dp4", std::string(kMoe) + " --set parallel.ep=2 --set parallel.zero_stage=1",
     "the dense parameters compared over 4 replicas; the experts compared over 2 replicas"},
    {"moe_ep2_tp2", std::string(kMoe) + " --set parallel.ep=2 --set parallel.tp=2",
     "the dense parameters compared over 2 replicas; the experts not compared: no other rank holds them"},
    {"moe_ep2_zero3", std::string(kMoe) + " --set parallel.ep=2 --set parallel.zero_stage=3",
     "the dense parameters not compared: at ZeRO stage 3 with fp32 parameters their replicas hold different parts "
     "of them; the experts not compared: at ZeRO stage 3"},
    {"bf16_dp4", "--set train.precision='\"bf16\"'", "the dense parameters compared over 4 replicas"},
    {"fp16_dp4_zero1", "--set train.precision='\"fp16\"' --set parallel.zero_stage=1",
     "the dense parameters not compared: at ZeRO stage 1 with fp16 parameters"},
    {"stale1_dp4", "--set parallel.max_staleness=1", "the dense parameters compared over 4 replicas"},
};

class PeriodicRun : public test::TrainE2E {
 protected:
  test::Result run(const std::string& fault, const std::string& flags, const std::string& name) {
    return test::run_shell(
        "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MEGATRAIN_FAULT='" + fault +
        "' mpirun --oversubscribe --bind-to none -np 4 -x OMP_NUM_THREADS=1 -x MEGATRAIN_FAULT " +
        test::megatrain_bin() + " train --config " + config_.string() +
        " --set train.steps=24 --set train.micro_batch_size=4 --set log.peak_tflops=0"
        " --set log.metrics_file=" + (dir_ / (name + ".jsonl")).string() +
        " --set train.eval_interval=6 --set checkpoint.save_interval=8"
        " --set checkpoint.dir=" + (dir_ / name / "ckpt").string() +
        " --set checkpoint.memory_interval=2 --set checkpoint.memory_dir=" + (dir_ / name / "shm").string() +
        " --set health.replica_check_interval=4 --set health.straggler_window=4 --set health.link_check_interval=4"
        " --set health.spike_window=10 --set health.run_dir=" + (dir_ / name / "run").string() + " " + flags,
        400);
  }
};

class PeriodicE2E : public PeriodicRun, public ::testing::WithParamInterface<PeriodicCase> {};

TEST_P(PeriodicE2E, EveryPeriodicActionFiresInAShortRun) {
  const PeriodicCase& c = GetParam();
  const auto r = run("slow:rank=3:ms=200:from_step=2;spike:rank=*:step=14:factor=50", c.flags, c.name);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "replica check every 4 steps: " + c.replicas);
  for (int step : {8, 16, 24}) EXPECT_CONTAINS(r.output, fmt::format("checkpoint: step {} saved to ", step));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("MEMORY_SNAPSHOT_COST rank=0 snapshots=(\\d+)"))) << r.output;
  EXPECT_GE(std::stoi(m[1]), 11) << m[0];  // steps 2, 4, …, 24: the last may still be in flight at the end
  int validations = 0;
  for (const auto& j : test::metrics_lines(dir_ / (std::string(c.name) + ".jsonl")))
    if (j.contains("val_loss")) ++validations;
  EXPECT_EQ(validations, 4);
  EXPECT_TRUE(std::regex_search(r.output, std::regex("STRAGGLER rank=3 "))) << r.output;
  EXPECT_CONTAINS(r.output, "LOSS_SPIKE step=14 ");
}

INSTANTIATE_TEST_SUITE_P(EveryLayout, PeriodicE2E, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ep 2 on 4 ranks: ranks 1 and 3 hold the same experts (ep coordinate 1, edp 0 and 1). A bit of
// rank 1's first expert tensor flipped after step 5 is named by the check at step 8, with both
// ranks of that pair (two replicas: no majority), and the run ends with exit 75. At ZeRO 0, where
// each rank updates all its values (above, the partition's owner would overwrite the flip with the
// update's all-gather).
class ExpertReplicaE2E : public PeriodicRun {};

TEST_F(ExpertReplicaE2E, AFlippedBitInAnExpertIsFoundAcrossTheRanksHoldingTheSameExperts) {
  const auto r = run("bitflip:rank=1:step=5:tensor=layers.0.moe.experts.fc.weight",
                     std::string(kMoe) + " --set parallel.ep=2 --set parallel.zero_stage=0", "bitflip");
  EXPECT_EQ(r.code, 75) << r.output;
  EXPECT_CONTAINS(r.output, "REPLICA_MISMATCH step=8 ranks=[1,3] params=[layers.0.moe.experts.fc.weight]");
}

}  // namespace
}  // namespace megatrain
