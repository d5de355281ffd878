// Stopping early (trainer/stop_request.h) on 4 ranks, (tp, dp) = (2, 2): SIGUSR1 sent to mpirun, or
// to rank 2 alone, stops every rank after the same step S (each logs STOP_REQUESTED step=S), the
// checkpoint of step S is committed as `latest`, the exit code is 10, and the run resumed from it
// continues with the losses of an uninterrupted run, bit for bit; train.exit_after_steps and
// train.exit_duration_mins do the same at their limits. The signalled runs report the time from
// the signal to the exit.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/e2e/e2e_fixture.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

class StopE2E : public test::TrainE2E {
 protected:
  // 4 ranks, tp 2; the LR schedule fixed by decay_steps, so runs of different lengths share it.
  std::string command(const std::string& extra, const std::string& metrics) const {
    return "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 4 -x "
           "OMP_NUM_THREADS=1 " + test::megatrain_bin() + " train --config " + config_.string() +
           " --set parallel.tp=2 --set train.eval_interval=0 --set model.dropout=0.0 "
           "--set optimizer.decay_steps=2000 --set checkpoint.dir=" + (dir_ / "ckpt").string() +
           " --set log.metrics_file=" + (dir_ / metrics).string() + " " + extra;
  }
  // The step every rank logged STOP_REQUESTED after (4 lines, one step), or -1.
  static int64_t stop_step(const std::string& output) {
    const std::regex re("STOP_REQUESTED step=(\\d+)");
    std::set<int64_t> steps;
    int lines = 0;
    for (auto it = std::sregex_iterator(output.begin(), output.end(), re); it != std::sregex_iterator(); ++it, ++lines)
      steps.insert(std::stoll((*it)[1]));
    EXPECT_EQ(lines, 4) << output;
    EXPECT_EQ(steps.size(), 1u) << output;
    return steps.size() == 1 ? *steps.begin() : -1;
  }
  // The checkpoint of step s is the newest; resumed to s + 2, its two steps equal an uninterrupted
  // run's to the bit.
  void expect_resumes_exactly(int64_t s, const std::string& name) {
    const std::string folder = fmt::format("step_{:07d}", s);
    ASSERT_TRUE(fs::exists(dir_ / "ckpt" / folder / "model.h5")) << name;
    std::ifstream latest(dir_ / "ckpt" / "latest");
    std::string newest;
    latest >> newest;
    EXPECT_EQ(newest, folder) << name;
    const std::string end = " --set train.steps=" + std::to_string(s + 2);
    const auto resumed = test::run_shell(command(end + " --set checkpoint.load=latest", name + "_resumed.jsonl"));
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    fs::remove_all(dir_ / "ckpt");
    const auto whole = test::run_shell(command(end, name + "_whole.jsonl"));
    ASSERT_EQ(whole.code, 0) << whole.output;
    const auto all = test::metrics_lines(dir_ / (name + "_whole.jsonl"));
    ASSERT_EQ(all.size(), static_cast<size_t>(s + 2)) << name;
    const std::vector<json> tail(all.end() - 2, all.end());
    EXPECT_EQ(test::compare_runs(tail, test::metrics_lines(dir_ / (name + "_resumed.jsonl")), 0.0, name), 2 * 2);
    fs::remove_all(dir_ / "ckpt");
  }
  // Starts a long run, waits for its third step, sends SIGUSR1 to mpirun or (rank2) to rank 2's
  // process only; the output ends with "latency_ms=… rc=…" (signal to exit, and the exit code).
  test::Result signalled(bool rank2, const std::string& name) {
    const fs::path script = dir_ / (name + ".sh"), metrics = dir_ / (name + ".jsonl");
    test::write_file(script, command("--set train.steps=2000", name + ".jsonl") + " &\npid=$!\n" +
                                 "until [ \"$(grep -c step " + metrics.string() + " 2>/dev/null)\" -ge 3 ] 2>/dev/null; "
                                 "do sleep 0.05; done\nt0=$(date +%s%N)\n" +
                                 (rank2 ? "for p in $(pgrep -P $pid); do grep -qaz '^OMPI_COMM_WORLD_RANK=2$' "
                                          "/proc/$p/environ && kill -USR1 $p; done\n"
                                        : "kill -USR1 $pid\n") +
                                 "wait $pid\nrc=$?\necho \"latency_ms=$((($(date +%s%N) - t0) / 1000000)) rc=$rc\"\n");
    return test::run_shell("bash " + script.string());
  }
};

TEST_F(StopE2E, ExitAfterStepsSavesStopsWithCode10AndResumesExactly) {
  const auto r = test::run_shell(command("--set train.steps=2000 --set train.exit_after_steps=3", "after.jsonl"));
  EXPECT_EQ(r.code, 10) << r.output;
  EXPECT_CONTAINS(r.output, "reason=train.exit_after_steps = 3");
  EXPECT_EQ(stop_step(r.output), 3);
  EXPECT_EQ(test::metrics_lines(dir_ / "after.jsonl").size(), 3u);
  expect_resumes_exactly(3, "after");
}

TEST_F(StopE2E, ExitDurationStopsAtTheSameStepOnEveryRank) {
  const auto r = test::run_shell(command("--set train.steps=2000 --set train.exit_duration_mins=0.01", "time.jsonl"));
  EXPECT_EQ(r.code, 10) << r.output;
  EXPECT_CONTAINS(r.output, "reason=train.exit_duration_mins = 0.01");
  const int64_t s = stop_step(r.output);
  EXPECT_GE(s, 1);
  EXPECT_LT(s, 2000);
  expect_resumes_exactly(s, "time");
}

TEST_F(StopE2E, SigusrToMpirunOrToOneRankStopsEveryRankAfterOneStepAndSaves) {
  for (const bool rank2 : {false, true}) {
    const std::string name = rank2 ? "rank2" : "mpirun";
    const auto r = signalled(rank2, name);
    EXPECT_CONTAINS(r.output, " rc=10");
    EXPECT_CONTAINS(r.output, "reason=signal SIGUSR1");
    const int64_t s = stop_step(r.output);
    EXPECT_GE(s, 3) << name;
    std::smatch latency;
    ASSERT_TRUE(std::regex_search(r.output, latency, std::regex("latency_ms=(\\d+)"))) << r.output;
    std::printf("SIGUSR1 to %s: every rank stopped after step %lld; signal to exit (save included) %s ms\n",
                name.c_str(), static_cast<long long>(s), latency[1].str().c_str());
    expect_resumes_exactly(s, name);
  }
}

}  // namespace
}  // namespace megatrain
