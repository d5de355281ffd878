// `megatrain selfcheck` (health/selfcheck.h; docs/robustness.md R06) on 4 ranks: a clean machine
// passes every check well inside 10 s and the JSON report says so; a rank whose GEMM is made 4
// times slower (MEGATRAIN_FAULT selfcheck_slow) fails the gemm check with a score near 0.25, exit
// code 75 and its host in reports/exclude.txt; a checkpoint folder that cannot be written fails
// the storage check naming the path and the system's reason; and the resilient driver run with
// --selfcheck does not launch training on a machine that fails it.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "tests/e2e/e2e_fixture.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class SelfCheckE2E : public test::TrainE2E {
 protected:
  static constexpr const char* kMpirun = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MEGATRAIN_FAULT='";
  test::Result selfcheck(const std::string& fault, const std::string& storage) {
    return test::run_shell(std::string(kMpirun) + fault + "' mpirun --oversubscribe -np 4 -x OMP_NUM_THREADS=1 "
                           "-x MEGATRAIN_FAULT " + test::megatrain_bin() + " selfcheck --checkpoint-dir " + storage +
                           " --run-dir " + (dir_ / "run").string(), 60);
  }
  json report() const {
    std::ifstream in(dir_ / "run" / "reports" / "selfcheck.json");
    std::stringstream text;
    text << in.rdbuf();
    return json::parse(text.str());
  }
};

TEST_F(SelfCheckE2E, ACleanMachinePassesEveryCheckQuickly) {
  const auto r = selfcheck("", (dir_ / "ckpt").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const json rep = report();
  EXPECT_TRUE(rep["pass"].get<bool>());
  EXPECT_LE(rep["seconds"].get<double>(), 10.0);
  std::vector<std::string> names;
  for (const json& c : rep["checks"]) {
    names.push_back(c["name"]);
    EXPECT_TRUE(c["pass"].get<bool>()) << c.dump();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"loopback", "pairs", "all_reduce", "all_to_all", "gemm", "storage", "memory"}));
  EXPECT_FALSE(fs::exists(dir_ / "run" / "reports" / "exclude.txt"));
  std::printf("selfcheck of 4 ranks: %.2f s\n", rep["seconds"].get<double>());
}

TEST_F(SelfCheckE2E, ASlowRankAndUnwritableStorageFailWithReasons) {
  auto r = selfcheck("selfcheck_slow:rank=2:factor=4", (dir_ / "ckpt").string());
  EXPECT_EQ(r.code, 75) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("selfcheck gemm +FAIL .* 2: [0-9.]+ GFLOP/s score=0\\.(1|2|3)\\d")))
      << r.output;
  EXPECT_EQ(report()["failing_ranks"], json::array({2})) << report().dump(1) << "\n" << r.output;
  std::ifstream exclude(dir_ / "run" / "reports" / "exclude.txt");
  std::string host;
  exclude >> host;
  EXPECT_EQ(host, report()["hosts"][2]);
  // A folder below a regular file can be neither created nor written.
  test::write_file(dir_ / "plain", "x");
  r = selfcheck("", (dir_ / "plain" / "ckpt").string());
  EXPECT_EQ(r.code, 75) << r.output;
  EXPECT_CONTAINS(r.output, "rank 0: " + (dir_ / "plain" / "ckpt").string() + "/.selfcheck_rank_0: cannot create (Not a directory)");
}

TEST_F(SelfCheckE2E, TheDriverDoesNotLaunchOnAMachineThatFailsIt) {
  const auto r = test::run_shell(std::string(kMpirun) + "selfcheck_slow:rank=1:factor=4' " MEGATRAIN_SOURCE_DIR
                                 "/scripts/megatrain-resilient --selfcheck --checkpoint-dir " + (dir_ / "ckpt").string() +
                                 " --run-dir " + (dir_ / "run").string() + " -- mpirun --oversubscribe -np 4 -x "
                                 "OMP_NUM_THREADS=1 " + test::megatrain_bin() + " train --config " + config_.string() +
                                 " --set train.steps=5", 120);
  EXPECT_EQ(r.code, 75) << r.output;
  EXPECT_CONTAINS(r.output, "self-check failed on hosts");
  EXPECT_EQ(r.output.find("] start attempt="), std::string::npos) << "training was launched:\n" << r.output;
}

}  // namespace
}  // namespace megatrain
