// A loss mask in the data (README "Loss masks in the data") through whole runs: the fortunes as
// prompt-completion pairs (each fortune's first line the prompt, the rest its completion) written
// by `megatrain preprocess --format prompt-completion`, so a sample's learned targets vary from
// micro-batch to micro-batch and rank to rank. On layouts that split the counted targets
// differently — dp 2 at ZeRO 1 and 3, pp 2 (1F1B), tp 2 with sequence parallelism, cp 2 by ring,
// and with eod_mask_loss on top — loss, gradient norm and validation loss of 10 steps equal one
// process within 1e-5 relative; the mask moves the 10th loss far beyond that; and a run resumed at
// step 5 continues bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/e2e/e2e_fixture.h"
#include "tests/e2e/metrics_reader.h"

namespace megatrain {
namespace {
namespace fs = std::filesystem;
using test::TrainE2E;

constexpr const char* kGpt = "--set model.dropout=0 ";

class LossMaskE2E : public TrainE2E {
 protected:
  void SetUp() override {
    TrainE2E::SetUp();
    std::ifstream in(test::fortunes_dir() / "science");
    std::ofstream out(dir_ / "pairs.jsonl");
    std::string line, fortune;
    int pairs = 0;
    const auto flush = [&] {
      const size_t cut = fortune.find('\n');
      if (cut != std::string::npos && cut + 1 < fortune.size())
        out << nlohmann::json{{"prompt", fortune.substr(0, cut + 1)}, {"completion", fortune.substr(cut + 1)}}.dump()
            << "\n",
            ++pairs;
      fortune.clear();
    };
    while (std::getline(in, line)) {
      if (line == "%")
        flush();
      else
        fortune += line + "\n";
    }
    flush();
    out.close();
    ASSERT_GT(pairs, 100);
    const auto r =
        test::run_megatrain("preprocess --tokenizer bytes --format prompt-completion --input " +
                            (dir_ / "pairs.jsonl").string() + " --output-prefix " + (dir_ / "pairs").string());
    ASSERT_EQ(r.code, 0) << r.output;
    ASSERT_TRUE(fs::exists(dir_ / "pairs.lossmask"));
  }
  std::string data(const std::string& prefix) const {
    return "--set data.train='\"" + (dir_ / prefix).string() + "\"' ";
  }
};

struct Layout {
  const char* name;
  int np;
  const char* flags;
};

const Layout kLayouts[] = {
    {"dp2_zero1", 2, "--set parallel.zero_stage=1"},
    {"dp2_zero3", 2, "--set parallel.zero_stage=3"},
    {"pp2_1f1b", 2, "--set parallel.pp=2"},
    {"tp2_sp", 2, "--set parallel.tp=2 --set parallel.sequence_parallel=true"},
    {"cp2_ring", 2, "--set parallel.cp=2"},
    {"dp2_eod_mask", 2, "--set data.eod_token=256 --set data.eod_mask_loss=true"},
};

TEST_F(LossMaskE2E, EveryLayoutTrainsLikeOneProcess) {
  for (const Layout& l : kLayouts) {
    const std::string flags = std::string(kGpt) + data("pairs");
    // Like with like: the eod_mask_loss case against one process with it too.
    const std::string extra = std::string(l.name) == "dp2_eod_mask" ? l.flags : "";
    const auto single = train_parity(1, flags + extra, std::string(l.name) + "_single");
    ASSERT_EQ(single.size(), 12u);  // 10 steps + 2 validations
    const auto parallel = train_parity(l.np, flags + l.flags, l.name);
    EXPECT_EQ(test::compare_runs(single, parallel, 1e-5, std::string(l.name) + " vs one process"), 10 * 2 + 2);
  }
}

// Without its .lossmask the same tokens train to another 10th loss, by far more than the tolerance.
TEST_F(LossMaskE2E, TheMaskChangesTheLoss) {
  for (const char* ext : {".bin", ".idx"})
    fs::copy_file(dir_ / (std::string("pairs") + ext), dir_ / (std::string("plain") + ext));
  const auto masked = train_parity(1, std::string(kGpt) + data("pairs"), "masked");
  const auto plain = train_parity(1, std::string(kGpt) + data("plain"), "plain");
  const double a = test::metrics_field(masked, "loss", 9).at(0), b = test::metrics_field(plain, "loss", 9).at(0);
  std::printf("step 10 loss with the mask %.8f, without %.8f (relative %.2e)\n", a, b, std::fabs(a - b) / b);
  EXPECT_GT(std::fabs(a - b), 1e-3 * std::fabs(b));
}

TEST_F(LossMaskE2E, ResumeIsBitwise) {
  expect_bitwise_resume(std::string(kGpt) + data("pairs") +
                        "--set train.eval_interval=0 --set checkpoint.save_interval=5 ");
}

}  // namespace
}  // namespace megatrain
