// Straggler detection end to end on 4 ranks, (tp, dp) = (2, 2), scoring windows of 10 steps
// (docs/robustness.md R12–R14), with delays injected through MEGATRAIN_FAULT: rank 3 sleeping 200 ms
// per step from step 5 is reported — it and only it — by step 25 (5 + 2 windows), with a score,
// its host and node and the last-arrival share, in the log and in reports/straggler.jsonl; a clean
// run, one slow step (a SLOW_STEP event instead), every rank slowed alike and a delay under the
// health.straggler_min_ms floor report nothing; rank 0 slowing down after 30 clean steps is an
// INDIVIDUAL_DEGRADATION by step 50.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <string>

#include "tests/e2e/e2e_fixture.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;

class StragglerE2E : public test::TrainE2E {
 protected:
  test::Result run(const std::string& fault, int steps, const std::string& extra = "") {
    return test::run_shell("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MEGATRAIN_FAULT='" + fault +
                           "' mpirun --oversubscribe --bind-to none -np 4 -x OMP_NUM_THREADS=1 -x MEGATRAIN_FAULT " +
                           test::megatrain_bin() + " train --config " + config_.string() +
                           " --set parallel.tp=2 --set train.eval_interval=0 --set log.peak_tflops=0 --set log.interval=10"
                           " --set train.steps=" + std::to_string(steps) + " --set health.straggler_window=10"
                           " --set health.run_dir=" + (dir_ / "run").string() + " " + extra);
  }
  // The ranks named by `kind` lines (STRAGGLER, INDIVIDUAL_DEGRADATION) and the first step at which each was.
  static std::map<int, int64_t> named(const std::string& output, const std::string& kind) {
    std::map<int, int64_t> first;
    const std::regex re(kind + " rank=(\\d+) [^\\n]* step=(\\d+)");
    for (auto it = std::sregex_iterator(output.begin(), output.end(), re); it != std::sregex_iterator(); ++it)
      first.try_emplace(std::stoi((*it)[1]), std::stoll((*it)[2]));
    return first;
  }
};

TEST_F(StragglerE2E, ASlowRankIsNamedWithinTwoWindowsAndAloneOnTheLogAndInTheReport) {
  const auto r = run("slow:rank=3:ms=200:from_step=5", 40);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto s = named(r.output, "STRAGGLER");
  ASSERT_EQ(s.size(), 1u) << r.output;
  ASSERT_EQ(s.begin()->first, 3) << r.output;
  EXPECT_LE(s.begin()->second, 25) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("STRAGGLER rank=3 host=\\S+ node=\\d+ section=compute "
                                                     "score=0\\.0\\d median=2\\d\\d\\.\\dms best=\\d+\\.\\dms "
                                                     "last_arrival=(0\\.[89]\\d|1\\.00) windows=2 step=20")))
      << r.output;
  std::ifstream report(dir_ / "run" / "reports" / "straggler.jsonl");
  std::set<int> ranks;
  for (std::string line; std::getline(report, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["kind"] == "STRAGGLER") ranks.insert(j["rank"].get<int>());
    EXPECT_TRUE(j.contains("host") && j.contains("score") && j.contains("t_wall")) << line;
  }
  EXPECT_EQ(ranks, std::set<int>{3});
  std::printf("straggler rank 3 (slowed from step 5) first reported at step %lld\n",
              static_cast<long long>(s.begin()->second));
}

TEST_F(StragglerE2E, NoiseAHiccupUniformSlownessAndASmallDelayAreNotStragglers) {
  // A 20 ms floor throughout: the small delay (8 ms) stays 12 ms under it, and 4 ranks sharing 2
  // cores showed medians 9–15 ms apart in a clean run on a loaded CI machine (the default 5 ms floor
  // then named two of them); the test also runs alone (SERIAL in CMakeLists.txt).
  const std::string floor = "--set health.straggler_min_ms=20";
  const std::pair<std::string, std::string> cases[] = {{"", floor},
                                                       {"slow:rank=1:ms=300:from_step=30:to_step=30", floor},
                                                       {"slow:rank=*:ms=50", floor},
                                                       {"slow:rank=2:ms=8", floor}};
  for (const auto& [fault, extra] : cases) {
    const auto r = run(fault, 60, extra);
    ASSERT_EQ(r.code, 0) << fault << "\n" << r.output;
    EXPECT_EQ(r.output.find("STRAGGLER"), std::string::npos) << fault << "\n" << r.output;
    EXPECT_EQ(r.output.find("INDIVIDUAL_DEGRADATION"), std::string::npos) << fault << "\n" << r.output;
    if (fault.find("to_step=30") != std::string::npos) EXPECT_CONTAINS(r.output, "SLOW_STEP step=30 rank=1");
  }
}

TEST_F(StragglerE2E, ARankSlowerThanItsOwnPastIsReported) {
  const auto r = run("slow:rank=0:ms=40:from_step=31", 60);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto d = named(r.output, "INDIVIDUAL_DEGRADATION");
  ASSERT_TRUE(d.contains(0)) << r.output;
  EXPECT_LE(d.at(0), 50);
  EXPECT_EQ(d.size(), 1u) << r.output;
}

// docs/robustness.md R15: with health.timeline on, `megatrain trace merge` joins the 4 ranks' traces
// into one that parses as a Chrome trace, and its heat map shows the straggler: rank 3 computes
// ~200 ms per step and waits little, the others wait ~200 ms. The picture script draws it.
TEST_F(StragglerE2E, TheMergedTimelineShowsWhoWaitedForWhom) {
  const auto r = run("slow:rank=3:ms=200:from_step=1", 12, "--set health.timeline=true");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto m = test::run_megatrain("trace merge " + (dir_ / "run").string());
  ASSERT_EQ(m.code, 0) << m.output;
  EXPECT_CONTAINS(m.output, "4 ranks, ");
  std::ifstream merged(dir_ / "run" / "timeline" / "merged.trace.json");
  const auto doc = nlohmann::json::parse(merged);
  std::set<int> pids;
  int steps = 0, comms = 0;
  for (const auto& e : doc["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid")) << e.dump();
    pids.insert(e["pid"].get<int>());
    if (e["ph"] == "X") {
      ASSERT_TRUE(e["ts"].is_number() && e["dur"].get<double>() >= 0.0 && e.contains("tid")) << e.dump();
      (e["cat"] == "step" ? steps : comms) += 1;
    }
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(steps, 4 * 12);
  EXPECT_GT(comms, 4 * 12);
  std::ifstream heat(dir_ / "run" / "timeline" / "heatmap.tsv");
  std::string header;
  std::getline(heat, header);
  EXPECT_EQ(header, "rank\tsteps\tstep_ms\tcompute_ms\twait_ms");
  for (int rank, n; heat >> rank >> n;) {
    double step_ms, compute_ms, wait_ms;
    heat >> step_ms >> compute_ms >> wait_ms;
    if (rank == 3) {
      EXPECT_GT(compute_ms, 180.0);
      EXPECT_LT(wait_ms, compute_ms / 2);
    } else {
      EXPECT_LT(compute_ms, 100.0) << rank;
      EXPECT_GT(wait_ms, 150.0) << rank;
    }
  }
  const fs::path png = dir_ / "timeline.png";
  const auto plot = test::run_shell(MEGATRAIN_SOURCE_DIR "/scripts/plot_timeline.py " +
                                    (dir_ / "run" / "timeline" / "merged.trace.json").string() + " -o " + png.string() +
                                    " --first-step 5 --steps 2");
  ASSERT_EQ(plot.code, 0) << plot.output;
  EXPECT_GT(fs::file_size(png), 10000u);
}

}  // namespace
}  // namespace megatrain
