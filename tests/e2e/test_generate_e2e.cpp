// `megatrain generate` end to end: train the tiny fixture config two steps with a checkpoint, then
// greedy and seeded sampling each twice give identical output that starts with the prompt, exit 0;
// a missing checkpoint, a folder that is not one, and an out-of-range option exit 66 or 64 with a message
// naming the problem.
#include "tests/e2e/e2e_fixture.h"

namespace megatrain {
namespace {
using test::TrainE2E;
namespace fs = std::filesystem;

class GenerateE2E : public TrainE2E {
 protected:
  void SetUp() override {
    TrainE2E::SetUp();
    if (HasFatalFailure()) return;
    ckpt_ = dir_ / "ckpt";
    train("--set train.steps=2 --set optimizer.warmup_steps=0 --set train.eval_interval=0 "
          "--set checkpoint.save_interval=2 --set checkpoint.dir='\"" + ckpt_.string() + "\"'",
          "metrics.jsonl");
    ASSERT_TRUE(fs::exists(ckpt_ / "latest"));
  }
  test::Result generate(const std::string& args) {
    return test::run_megatrain("generate --prompt 'The ' " + args, 120);
  }
  fs::path ckpt_;
};

TEST_F(GenerateE2E, GreedyAndSeededSamplingAreReproducible) {
  const std::string greedy = "--checkpoint " + ckpt_.string() + " --temperature 0 --max-new-tokens 30";
  const auto a = generate(greedy), b = generate(greedy);
  ASSERT_EQ(a.code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_EQ(a.output.rfind("The ", 0), 0u) << a.output;  // the prompt comes first
  EXPECT_NE(a.output.find("[generate: "), std::string::npos) << a.output;
  // The step folder itself works as well as the checkpoint dir.
  const auto c = generate("--checkpoint " + (ckpt_ / "step_0000002").string() + " --temperature 0 --max-new-tokens 30");
  EXPECT_EQ(c.output, a.output);
  const std::string sampled =
      "--checkpoint " + ckpt_.string() + " --temperature 0.8 --top-k 40 --top-p 0.95 --seed 3 --max-new-tokens 40";
  const auto s1 = generate(sampled), s2 = generate(sampled);
  ASSERT_EQ(s1.code, 0) << s1.output;
  EXPECT_EQ(s1.output, s2.output);
}

TEST_F(GenerateE2E, BadInputExitsWithItsCodeAndAClearMessage) {
  const auto missing = generate("--checkpoint " + (dir_ / "no_such_run").string());
  EXPECT_EQ(missing.code, 66) << missing.output;
  EXPECT_NE(missing.output.find("no_such_run"), std::string::npos) << missing.output;
  const auto not_ckpt = generate("--checkpoint " + dir_.string());
  EXPECT_EQ(not_ckpt.code, 66) << not_ckpt.output;
  EXPECT_NE(not_ckpt.output.find("not a checkpoint"), std::string::npos) << not_ckpt.output;
  const auto top_p = generate("--checkpoint " + ckpt_.string() + " --top-p 2");
  EXPECT_EQ(top_p.code, 64) << top_p.output;
  EXPECT_NE(top_p.output.find("--top-p 2 must be in (0, 1]"), std::string::npos) << top_p.output;
  const auto temp = generate("--checkpoint " + ckpt_.string() + " --temperature -1");
  EXPECT_EQ(temp.code, 64) << temp.output;
  EXPECT_NE(temp.output.find("--temperature"), std::string::npos) << temp.output;
}

}  // namespace
}  // namespace megatrain
