// The planner's device profile file (planner/plan_profile.h): what `plan --measure` writes reads back
// whole, and a file that cannot say how the ranks share the node's cores is refused by name.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <thread>

#include "planner/plan_profile.h"
#include "tests/input_error.h"
#include "tests/temp_dir.h"
#include "trainer/peak_flops.h"

namespace megatrain {
namespace {

DeviceProfile two_cores() {
  DeviceProfile p;
  p.name = "cpu", p.peak_tflops = 0.05, p.efficiency = 0.5, p.memory_gib = 8, p.memory_gbps = 20;
  p.intra_gbps = p.inter_gbps = 5, p.latency_us = 3, p.devices_per_node = 4, p.overlap = 0;
  p.cores = 2, p.threads = 1;
  return p;
}

// [Note: CPU-time clock] A rank that does not run (here: sleeps 200 ms, as one waiting for a core
// would) spends no CPU time, so the profile's clock does not count it; the wall clock does.
TEST(PlanProfile, CpuClockSkipsTimeOffTheCores) {
  const double cpu0 = peak_clock_seconds(PeakClock::cpu), wall0 = peak_clock_seconds(PeakClock::wall);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_GE(peak_clock_seconds(PeakClock::wall) - wall0, 0.2);
  EXPECT_LT(peak_clock_seconds(PeakClock::cpu) - cpu0, 0.1);
}

TEST(PlanProfile, FileKeepsTheCoresAndThreads) {
  test::TempDir dir("plan_profile");
  const std::string path = (dir / "cpu.toml").string();
  DeviceProfile p = two_cores();
  p.threads = 3;
  std::ofstream(path) << profile_to_toml(p);
  const DeviceProfile q = load_profile(path);
  EXPECT_EQ(q.cores, 2);
  EXPECT_EQ(q.threads, 3);
  EXPECT_EQ(q.devices_per_node, 4);
  EXPECT_DOUBLE_EQ(q.efficiency, 0.5);
}

TEST(PlanProfile, MissingOrImpossibleCoresAreNamed) {
  test::TempDir dir("plan_profile_bad");
  const std::string path = (dir / "cpu.toml").string();
  const std::string whole = profile_to_toml(two_cores());
  std::ofstream(path) << std::regex_replace(whole, std::regex("cores = 2\n"), "");
  EXPECT_NE(test::input_error_of([&] { load_profile(path); }).find("no number 'cores'"), std::string::npos);
  std::ofstream(path) << std::regex_replace(whole, std::regex("threads = 1"), "threads = 0");
  const std::string e = test::input_error_of([&] { load_profile(path); });
  EXPECT_NE(e.find("threads = 0"), std::string::npos) << e;
  EXPECT_NE(e.find("plan --measure"), std::string::npos) << e;
}

}  // namespace
}  // namespace megatrain
