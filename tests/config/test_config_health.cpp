// The [health] section's rules (config/config_validate.cpp): timeouts, detectors, and the spike
// policies, each error naming the file and the key.
#include <gtest/gtest.h>

#include "tests/config/config_fixture.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {

using test::ConfigTest;

TEST_F(ConfigTest, HealthTimeoutsMustBePositiveAndTheFactorAtLeastOne) {
  load_error("[health]\ninit_timeout_s = 0.0\n", "health.init_timeout_s");
  load_error("[health]\nstep_timeout_floor_s = -1.0\n", "health.step_timeout_floor_s");
  EXPECT_CONTAINS(load_error("[health]\nstep_timeout_factor = 0.5\n", "health.step_timeout_factor"), "at least 1");
  load_error("[health]\ncalibrate_steps = 0\n", "health.calibrate_steps");
  load_error("[health]\nio_timeout_s = 0.0\n", "health.io_timeout_s");
  load_error("[health]\nheartbeat_interval_s = -1.0\n", "health.heartbeat_interval_s");
  load_error("[health]\nflight_recorder_entries = 0\n", "health.flight_recorder_entries");
  load_error("[health]\nwatchdogs = false\n", "health.watchdogs");
  Config c = load_config(write("[health]\nrun_dir = \"run\"\nwatchdog = false\nheartbeat_interval_s = 0.0\n"), {});
  EXPECT_EQ(c.health.run_dir, "run");
  EXPECT_FALSE(c.health.watchdog);
  EXPECT_EQ(c.health.heartbeat_interval_s, 0.0);
}

TEST_F(ConfigTest, SpikePoliciesAndLinkProbes) {
  EXPECT_CONTAINS(load_error("[health]\non_spike = \"restart\"\n", "health.on_spike"), "\"rollback\"");
  EXPECT_CONTAINS(load_error("[health]\non_spike = \"rollback\"\n", "health.on_spike"), "checkpoint.dir is empty");
  EXPECT_CONTAINS(load_error("[health]\non_spike = \"rollback\"\n[checkpoint]\ndir = \"ck\"\n", "health.on_spike"),
                  "checkpoint.save_interval is 0");
  load_error("[health]\nspike_skip_batches = 0\n", "health.spike_skip_batches");
  load_error("[health]\nspike_max_rollbacks = 0\n", "health.spike_max_rollbacks");
  load_error("[health]\nlink_check_interval = -1\n", "health.link_check_interval");
  Config c = load_config(write("[health]\non_spike = \"rollback\"\nspike_skip_batches = 7\nspike_max_rollbacks = 2\n"
                               "[checkpoint]\ndir = \"ck\"\nsave_interval = 10\n"), {});
  resolve_config(c, 1);
  EXPECT_EQ(batches_reserved_for_rollbacks(c.health), 14);
  c.health.on_spike = "skip";
  EXPECT_EQ(batches_reserved_for_rollbacks(c.health), 0);
}

}  // namespace
}  // namespace megatrain
