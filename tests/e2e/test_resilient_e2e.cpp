// The resilient driver (scripts/megatrain-resilient; docs/robustness.md R03, R05, R23, R25) on 4 ranks,
// (tp, dp) = (2, 2), saving every 10 steps, with faults injected through MEGATRAIN_FAULT:
//  - rank 3 killed at step 25: one restart, from step 20, and the run ends with the losses and
//    weights of a fault-free run, bit for bit; with memory snapshots every step, from step 24 in
//    memory, also when the second host's memory is gone (its ranks fetch their buddies' copies), with
//    context parallelism, and when every snapshot's copy is late (the next update waits for it); a
//    crash in the last step's save: restored from memory at the last step, that step is still saved;
//  - a host (virtual: MEGATRAIN_RANKS_PER_NODE = 2) whose two ranks stop, with the trainer's own
//    watchdog off: the driver sees the heartbeats stop, names the node and its ranks, restarts;
//  - a launch that starts no rank yet ends 0 (srun after a requeue): restarted, not "finished";
//  - a launch that fails before any rank starts, naming no host: the host that fails alone is left out;
//  - a binary named otherwise (megatrain-v2) is found in the command; a command without one is refused;
//  - the launcher told to end a failed job's ranks without a grace period;
//  - a rank dying before the first save in every launch: exit 93 after 3 attempts without progress;
//    a bad config: exit 64 after one attempt;
//  - a chaos soak with memory snapshots of random kills, hangs (frozen ranks: stopped at a step's
//    start or inside a collective), exceptions, slow ranks and checkpoint crashes (one per 30 steps
//    of this machine on average, at least 1 s apart) and host losses (the second virtual host's ranks
//    killed and its memory store removed, one per 4 such intervals on average): every fault detected that its
//    launch ran long enough to detect (a slow rank is judged over whole straggler windows; the next
//    fault, a lost rank or the end of training may come first), a lost host's state restored from
//    its buddies' copies, the run finishes, and its final weights equal the fault-free run's; no
//    process is left. Prints the figures (detection latency, restarts, ETTR).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/e2e/resilient_fixture.h"
#include "tests/expect_contains.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::ResilientE2E;

// Storage checkpoints only: the user's checkpoint.memory_interval = 0 overrides the driver's default
// of a memory snapshot every step.
TEST_F(ResilientE2E, AKilledRankCostsOneRestartFromTheLastCheckpointAndNotABit) {
  const auto r = drive("kill:rank=3:step=25:sig=9", 40, "", "--set checkpoint.memory_interval=0");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto ev = events();
  ASSERT_EQ(of(ev, "restart").size(), 1u) << r.output;
  const auto starts = of(ev, "start");
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(starts[1]["resume_from"], 20);
  ASSERT_EQ(of(ev, "PEER_LOST").size(), 1u);
  EXPECT_EQ(of(ev, "PEER_LOST")[0]["rank"], 3);
  EXPECT_EQ(of(ev, "exit")[0]["code"], 137);
  EXPECT_TRUE(of(ev, "MEMORY_RESTORE").empty()) << r.output;
  EXPECT_EQ(r.output.find("memory snapshots: every"), std::string::npos) << r.output;
  const double restart_s = starts[1]["t_wall"].get<double>() - of(ev, "FAULT_INJECTED")[0]["t_wall"].get<double>();
  expect_equals_clean_run(40, clean_run(40, ""));
  std::printf("kill at step 25: 1 restart from step 20 (5 steps lost), relaunched %.2f s after the kill\n", restart_s);
}

// docs/robustness.md R26: with memory snapshots every step (the driver's default: nothing in the
// config or on the command line sets checkpoint.memory_interval; two virtual hosts of two ranks,
// buddies across them), the same kill costs one or two steps instead of five: the relaunch restores step 24
// from the hosts' memory (23 when step 24's snapshot was still being stored beside step 25), each rank
// reading its dp group's snapshots on its own host, and the run ends with the fault-free weights.
TEST_F(ResilientE2E, AKilledRankResumesFromMemoryLosingOneOrTwoSteps) {
  const std::string memory = "--set checkpoint.memory_dir=" + (dir_ / "shm").string();
  const auto r = drive("kill:rank=3:step=25:sig=9", 40, "", memory);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto ev = events();
  ASSERT_EQ(of(ev, "restart").size(), 1u) << r.output;
  const auto restores = of(ev, "MEMORY_RESTORE");
  ASSERT_EQ(restores.size(), 1u) << r.output;
  const std::string step = restores[0]["step"];
  EXPECT_TRUE(step == "24" || step == "23") << step;  // 23 when step 24's snapshot was still in flight
  EXPECT_EQ(restores[0]["source"], "memory");
  EXPECT_EQ(restores[0]["read_local"], "8");  // each rank its dp group's 2, all on its host
  EXPECT_EQ(restores[0]["fetched"], "0");
  EXPECT_CONTAINS(r.output, "memory snapshots: every 1 steps in ");
  EXPECT_CONTAINS(r.output, "memory snapshots: removed");  // at the end: the host's memory is freed
  for (const char* host : {"vnode0", "vnode1"}) EXPECT_FALSE(fs::exists(dir_ / "shm" / host)) << host;
  const auto recovery = of(ev, "RECOVERY");
  ASSERT_EQ(recovery.size(), 1u) << r.output;
  const json& t = recovery[0];
  EXPECT_EQ(t["source"], "memory");
  for (const char* part : {"detection_s", "teardown_s", "relaunch_s", "startup_s", "state_load_s", "first_step_s"})
    EXPECT_GE(t[part].get<double>(), 0.0) << part;
  EXPECT_NEAR(t["total_s"].get<double>(),
              t["detection_s"].get<double>() + t["teardown_s"].get<double>() + t["relaunch_s"].get<double>() +
                  t["startup_s"].get<double>() + t["state_load_s"].get<double>() + t["first_step_s"].get<double>(),
              0.01);
  expect_equals_clean_run(40, clean_run(40, ""));
  std::printf("kill at step 25 with memory snapshots: resumed from step %s; from the kill to the first new step "
              "%.2f s: detection %.2f, teardown %.2f, relaunch %.2f, start-up %.2f, state load %.3f, first step %.3f\n",
              step.c_str(), t["total_s"].get<double>(), t["detection_s"].get<double>(), t["teardown_s"].get<double>(),
              t["relaunch_s"].get<double>(), t["startup_s"].get<double>(), t["state_load_s"].get<double>(),
              t["first_step_s"].get<double>());
}

// A step's snapshot is copied beside the next step, whose update waits for the copy: with every copy
// 300 ms late (ckpt_slow; the saves too) the next update would come first and step S's snapshot would
// hold some of step S + 1's state. The kill at step 25 resumes from memory and the run still ends
// with the fault-free weights; the time the steps waited is logged.
TEST_F(ResilientE2E, ASnapshotCopiedBesideTheNextStepHoldsItsOwnStep) {
  const std::string memory = "--set checkpoint.memory_interval=1 --set checkpoint.memory_dir=" + (dir_ / "shm").string();
  const auto r = drive("ckpt_slow:ms=300:attempt=*;kill:rank=3:step=25:sig=9", 30, "", memory);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto restores = of(events(), "MEMORY_RESTORE");
  ASSERT_EQ(restores.size(), 1u) << r.output;
  EXPECT_EQ(restores[0]["source"], "memory");
  std::smatch m;
  const std::regex cost("MEMORY_SNAPSHOT_COST rank=0 snapshots=\\d+ mean_wait_ms=([0-9.]+)");
  ASSERT_TRUE(std::regex_search(r.output, m, cost)) << r.output;
  EXPECT_GE(std::stod(m[1]), 150.0) << m[0];  // each update waited for most of its copy's 300 ms
  const std::regex sizes("memory snapshots: every 1 steps in \\S+, ([0-9.]+) MiB per rank \\+ ([0-9.]+) MiB of rank 2's");
  ASSERT_TRUE(std::regex_search(r.output, m, sizes)) << r.output;
  EXPECT_GT(std::stod(m[1]), 0.0) << m[0];
  EXPECT_EQ(m[1], m[2]) << m[0];  // rank 0's partition and its ward's are the same size
  expect_equals_clean_run(30, clean_run(30, ""));
}

// The same with context parallelism, (cp, dp) = (2, 2): the snapshots hold each rank's share of the
// partition over all four ranks (dp_cp), so each rank restores from all four ranks' snapshots, and
// the run ends with the fault-free weights.
TEST_F(ResilientE2E, AKilledContextParallelRankResumesFromMemory) {
  const std::string cp = "--set parallel.tp=1 --set parallel.cp=2 --set parallel.zero_stage=1";
  const auto r = drive("kill:rank=3:step=25:sig=9", 40, "",
                       cp + " --set checkpoint.memory_interval=1 --set checkpoint.memory_dir=" + (dir_ / "shm").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const auto restores = of(events(), "MEMORY_RESTORE");
  ASSERT_EQ(restores.size(), 1u) << r.output;
  EXPECT_EQ(restores[0]["source"], "memory");
  const std::string step = restores[0]["step"];
  EXPECT_TRUE(step == "24" || step == "23") << step;
  EXPECT_EQ(std::stoi(restores[0]["read_local"].get<std::string>()) +
                std::stoi(restores[0]["fetched"].get<std::string>()),
            16);  // each of the 4 ranks the snapshots of all 4
  expect_equals_clean_run(40, clean_run(40, cp));
}

// A host lost with its memory: before the relaunch the launcher wipes the second virtual host's store
// (a replaced host), so its ranks 2 and 3 receive their dp groups' snapshots from ranks 0 and 1,
// whose host holds them and the buddy copies; the run still ends with the fault-free weights.
TEST_F(ResilientE2E, AHostLostWithItsMemoryRecoversFromTheBuddiesCopies) {
  const fs::path shm = dir_ / "shm", launcher = dir_ / "replace_host.sh";
  std::ofstream(launcher) << "if [ -e \"$0.launched\" ]; then rm -rf " << shm.string() << "/vnode1; fi\n"
                             "touch \"$0.launched\"\nexec \"$@\"\n";
  const auto r = drive("kill:rank=2:step=25:sig=9", 40, "",
                       "--set checkpoint.memory_interval=1 --set checkpoint.memory_dir=" + shm.string(), 300,
                       "sh " + launcher.string() + " ");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto restores = of(events(), "MEMORY_RESTORE");
  ASSERT_EQ(restores.size(), 1u) << r.output;
  EXPECT_TRUE(restores[0]["step"] == "24" || restores[0]["step"] == "23") << restores[0]["step"];
  EXPECT_EQ(restores[0]["read_local"], "4");  // ranks 0 and 1: 2 each on their host
  EXPECT_EQ(restores[0]["fetched"], "4");     // ranks 2 and 3: 2 each from ranks 0 and 1's host
  expect_equals_clean_run(40, clean_run(40, ""));
}

// A rank dies inside the last step's save (after writing its shard, before the commit), by which time
// that step's memory snapshot is usually committed: the relaunch restores the last step from memory,
// has no step to run, and writes the last checkpoint itself (the chaos soak once ended without it).
// Either way the run ends with the fault-free weights in ckpt/step_0000040.
TEST_F(ResilientE2E, ALastStepRestoredFromMemoryIsStillSavedToStorage) {
  const auto r = drive("ckpt_crash:rank=0:step=40:phase=after_shard_before_commit", 40, "",
                       "--set checkpoint.memory_dir=" + (dir_ / "shm").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const auto restores = of(events(), "MEMORY_RESTORE");
  ASSERT_EQ(restores.size(), 1u) << r.output;
  const std::string step = restores[0]["step"];
  EXPECT_TRUE(step == "40" || step == "39") << step;
  if (step == "40") EXPECT_CONTAINS(r.output, "restored step 40 from memory, the last: writing its checkpoint");
  expect_equals_clean_run(40, clean_run(40, ""));
  std::printf("a crash in the last save: restored step %s from memory\n", step.c_str());
}

// A launch that ends 0 without training (srun after a requeue: "task launch failed", exit 0) is
// not a finished run: the driver restarts, and the run ends with the fault-free weights.
TEST_F(ResilientE2E, ALaunchThatStartsNoRankIsRestartedNotCalledFinished) {
  const fs::path launcher = dir_ / "flaky_launcher.sh";
  std::ofstream(launcher) << "if [ ! -e \"$0.once\" ]; then touch \"$0.once\"\n"
                             "  echo 'srun: error: task 0 launch failed: Unspecified error'; exit 0\nfi\nexec \"$@\"\n";
  const auto r = drive("", 20, "", "", 300, "sh " + launcher.string() + " ");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto ev = events();
  const auto exits = of(ev, "exit");
  ASSERT_EQ(exits.size(), 2u) << r.output;
  EXPECT_EQ(exits[0]["code"], 69);
  EXPECT_EQ(exits[1]["code"], 0);
  EXPECT_EQ(of(ev, "restart").size(), 1u);
  ASSERT_EQ(of(ev, "TRAIN_FINISHED").size(), 1u);
  EXPECT_EQ(of(ev, "TRAIN_FINISHED")[0]["steps"], "20");
  expect_equals_clean_run(20, clean_run(20, ""));
}

// The driver with --hosts HOSTS over `command` (from the megatrain binary on), launched by a fake
// launcher: it fails as mpirun does when host "gone" is in its host list (the daemon never connected
// back: no host named), and runs mpirun on this machine otherwise.
test::Result drive_on_hosts(const fs::path& dir, const std::string& hosts, const std::string& command) {
  const fs::path launcher = dir / "hosts_launcher.sh";
  std::ofstream(launcher) << "hosts=$1 np=$2; shift 2\n"
                             "case $hosts in *gone*) echo 'ORTE was unable to reliably start one or more daemons.'; "
                             "exit 1 ;; esac\n"
                             "exec mpirun --oversubscribe -np \"$np\" -x OMP_NUM_THREADS=1 "
                             "-x MEGATRAIN_RANKS_PER_NODE \"$@\"\n";
  return test::run_shell("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MEGATRAIN_RANKS_PER_NODE=2 "
                         MEGATRAIN_SOURCE_DIR "/scripts/megatrain-resilient --checkpoint-dir " +
                             (dir / "ckpt").string() + " --run-dir " + (dir / "run").string() + " --hosts " + hosts +
                             " --backoff-s 0.2 -- sh " + launcher.string() + " {hosts} {np} " + command,
                         300);
}

// The trainer command from its binary on (drive_on_hosts places the launcher before it).
std::string from_binary(const std::string& command) { return command.substr(command.find(test::megatrain_bin())); }

// A host gone since the last launch, whose daemon never connects back: the launch fails before any
// rank starts and the launcher names no host. The driver tries each host in use alone with `megatrain
// selfcheck`, leaves out the one that fails, and the job runs on the other (without this: three
// identical failed launches, exit 93).
TEST_F(ResilientE2E, AHostThatCannotStartAJobIsFoundByTryingEachHostAlone) {
  const auto r = drive_on_hosts(dir_, "up:2,gone:2", from_binary(trainer(10)));
  ASSERT_EQ(r.code, 0) << r.output;
  const auto ev = events();
  const auto checked = of(ev, "HOST_CHECKED");
  ASSERT_EQ(checked.size(), 2u) << r.output;
  EXPECT_EQ(checked[0]["node_host"], "up");
  EXPECT_EQ(checked[0]["code"], 0);
  EXPECT_EQ(checked[1]["node_host"], "gone");
  EXPECT_EQ(checked[1]["code"], 1);
  const auto excluded = of(ev, "HOST_EXCLUDED");
  ASSERT_EQ(excluded.size(), 1u) << r.output;
  EXPECT_EQ(excluded[0]["node_host"], "gone");
  EXPECT_EQ(excluded[0]["hosts_left"], "up:2");
  const auto exits = of(ev, "exit");
  ASSERT_EQ(exits.size(), 2u) << r.output;
  EXPECT_EQ(exits[0]["code"], 1);
  EXPECT_EQ(exits[1]["code"], 0);
  ASSERT_EQ(of(ev, "TRAIN_FINISHED").size(), 1u);
  EXPECT_EQ(of(ev, "TRAIN_FINISHED")[0]["steps"], "10");
}

// The binary may be named otherwise (megatrain-v2: what a user keeps beside a newer build) and the
// driver still finds `megatrain train` in the command for its host probes; a command with no such
// binary is refused at once, naming what is missing, when --hosts needs it (it ended in a Python
// traceback when the run finished).
TEST_F(ResilientE2E, ABinaryNamedOtherwiseIsFoundAndACommandWithoutOneIsRefused) {
  const fs::path renamed = dir_ / "megatrain-v2";
  fs::create_symlink(test::megatrain_bin(), renamed);
  std::string command = from_binary(trainer(10));
  command.replace(0, test::megatrain_bin().size(), renamed.string());
  const auto r = drive_on_hosts(dir_, "up:2", command);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(of(events(), "TRAIN_FINISHED").size(), 1u) << r.output;
  const auto refused = drive_on_hosts(dir_, "up:2", "echo train");
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_CONTAINS(refused.output, "must contain the megatrain binary followed by `train`");
}

// scripts/megatrain-resilient [driver: no grace at teardown]: the launcher gets
// OMPI_MCA_odls_base_sigkill_timeout=0, so that mpirun ends the ranks of a job that lost one at once
// instead of a second per daemon later; a value the user set is passed on unchanged.
TEST_F(ResilientE2E, TheLauncherEndsAFailedJobsRanksWithoutGraceUnlessTheUserSetOne) {
  const fs::path launcher = dir_ / "env_launcher.sh";
  std::ofstream(launcher) << "echo \"sigkill_timeout=[$OMPI_MCA_odls_base_sigkill_timeout]\"\n"
                             "echo 'TRAIN_FINISHED steps=0'\n";
  const std::string driver = "--checkpoint-dir " + (dir_ / "ckpt").string() + " --run-dir " + (dir_ / "run").string() +
                             " -- sh " + launcher.string() + " megatrain train";
  auto r = test::run_shell(MEGATRAIN_SOURCE_DIR "/scripts/megatrain-resilient " + driver);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "sigkill_timeout=[0]");
  r = test::run_shell("env OMPI_MCA_odls_base_sigkill_timeout=3 " MEGATRAIN_SOURCE_DIR "/scripts/megatrain-resilient " +
                      driver);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "sigkill_timeout=[3]");
}

// docs/robustness.md R18, at dp = 4: a bit flipped in rank 2's copy of a weight after step 22 is found
// by the replica check at step 25, which names the rank and the tensor and ends the job (75); the
// driver restarts from step 20 and the run ends with the fault-free weights. Storage checkpoints only
// (the driver's --memory-interval 0); the test below is the same with memory snapshots.
TEST_F(ResilientE2E, AFlippedBitInOneReplicaIsFoundAndUndoneByARestart) {
  const std::string dp4 = "--set parallel.tp=1 --set train.micro_batch_size=4 --set health.replica_check_interval=5";
  const auto r = drive("bitflip:rank=2:step=22:tensor=layers.0.attn.qkv.weight", 40, "--memory-interval 0", dp4);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "REPLICA_MISMATCH step=25 ranks=[2] params=[layers.0.attn.qkv.weight]");
  const auto ev = events();
  EXPECT_EQ(of(ev, "exit")[0]["code"], 75);
  ASSERT_EQ(of(ev, "start").size(), 2u);
  EXPECT_EQ(of(ev, "start")[1]["resume_from"], 20);
  expect_equals_clean_run(40, clean_run(40, dp4));
}

// With memory snapshots the flipped bit is in every snapshot taken after step 22: the mismatch
// discards them, and the restart loads the storage checkpoint of step 20 instead.
TEST_F(ResilientE2E, AFlippedBitIsNotRestoredFromMemorySnapshots) {
  const std::string dp4 = "--set parallel.tp=1 --set train.micro_batch_size=4 --set health.replica_check_interval=5";
  const auto r = drive("bitflip:rank=2:step=22:tensor=layers.0.attn.qkv.weight", 40, "",
                       dp4 + " --set checkpoint.memory_interval=1 --set checkpoint.memory_dir=" + (dir_ / "shm").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "memory snapshots: removed");
  EXPECT_CONTAINS(r.output, "(REPLICA_MISMATCH: ");
  EXPECT_TRUE(of(events(), "MEMORY_RESTORE").empty()) << r.output;
  expect_equals_clean_run(40, clean_run(40, dp4));
}

TEST_F(ResilientE2E, AFrozenHostIsFoundByItsHeartbeats) {
  const auto r = drive("hang:rank=2:step=100;hang:rank=3:step=100", 140, "--hb-timeout-s 3",
                       "--set health.watchdog=false");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto ev = events();
  const auto stale = of(ev, "NODE_STALE");
  ASSERT_EQ(stale.size(), 1u) << r.output;
  EXPECT_EQ(stale[0]["node"], 1);
  // Both ranks of the stopped node, though their beats were up to an interval apart when the older
  // passed the timeout (the younger had missed a beat).
  EXPECT_EQ(stale[0]["ranks"], json::array({2, 3})) << r.output;
  EXPECT_EQ(stale[0]["reason"], "no heartbeat");
  EXPECT_GE(stale[0]["last_step"].get<int>(), 60);
  EXPECT_EQ(of(ev, "exit")[0]["code"], 75);
  EXPECT_EQ(of(ev, "restart").size(), 1u);
  const double latency = stale[0]["t_wall"].get<double>() - of(ev, "FAULT_INJECTED")[0]["t_wall"].get<double>();
  EXPECT_LE(latency, 3.0 + 2.0);
  std::printf("a stopped host was declared stale %.2f s after it stopped (heartbeat timeout 3 s)\n", latency);
}

// With the driver's default memory snapshots the first launch gets further than none (its steps 1 and
// 2 are in memory); the three after it resume from step 2 and die at step 3 again: a crash loop.
TEST_F(ResilientE2E, ACrashLoopStopsWith93AndABadConfigIsNeverRetried) {
  const fs::path shm = dir_ / "shm";
  auto r = drive("kill:rank=1:step=3:sig=9:attempt=*", 40, "", "--set checkpoint.memory_dir=" + shm.string());
  EXPECT_EQ(r.code, 93) << r.output;
  EXPECT_EQ(of(events(), "start").size(), 4u);
  // A driver that gives up leaves the memory snapshots for the next run to resume from.
  for (const char* host : {"vnode0", "vnode1"}) EXPECT_TRUE(fs::exists(shm / host)) << host;
  // The first launch trained 2 steps (progress: relaunched at once); the backoff doubles over the
  // three after it, which made none.
  std::vector<double> backoffs;
  for (const json& e : of(events(), "restart")) backoffs.push_back(e["backoff_s"].get<double>());
  EXPECT_EQ(backoffs, (std::vector<double>{0.0, 0.2, 0.4}));
  EXPECT_CONTAINS(r.output, "3 attempts in a row committed no checkpoint beyond step 0: a crash loop");
  fs::remove_all(dir_ / "run");
  r = drive("", 40, "", "--set model.n_heads=5");
  EXPECT_EQ(r.code, 64) << r.output;
  EXPECT_EQ(of(events(), "start").size(), 1u);
}

// Two kills, each after progress, are relaunched at once; then two launches without progress wait
// the first backoff and twice it: a launch that progressed starts the doubling again.
TEST_F(ResilientE2E, ALaunchThatProgressedIsRelaunchedAtOnce) {
  const auto r = drive("kill:rank=1:step=12:sig=9:attempt=1;kill:rank=2:step=24:sig=9:attempt=2;"
                       "kill:rank=1:step=24:sig=9:attempt=3;kill:rank=1:step=24:sig=9:attempt=4",
                       30);
  ASSERT_EQ(r.code, 0) << r.output;
  std::vector<double> backoffs;
  for (const json& e : of(events(), "restart")) backoffs.push_back(e["backoff_s"].get<double>());
  EXPECT_EQ(backoffs, (std::vector<double>{0.0, 0.0, 0.2, 0.4})) << r.output;
}

// The faults' mean interval is 30 of this machine's steps (at least 1 s), measured on the fault-free
// run first: a launch must run 10 steps past a save to make progress, so with a fixed 1 s a slow or
// loaded machine (60 ms steps in one CI run against 18 ms here) saw three launches in a row die
// before their save and the driver, rightly, called it a crash loop (93). With 30 steps a launch
// dies before its save with probability 1 − e^(−1/3) ≈ 0.28; the soak allows 6 such launches in a
// row (0.28^6 ≈ 5e-4; the crash-loop stop itself is the test above). 300 steps draw ~10 faults
// (600 steps drew ~20 and took 4 minutes of CI's 40).
TEST_F(ResilientE2E, AChaosSoakEndsWithTheFaultFreeWeights) {
  const std::string flags = "--set log.interval=10 --set health.straggler_window=10";
  const std::string memory =
      " --set checkpoint.memory_interval=1 --set checkpoint.memory_dir=" + (dir_ / "shm").string();
  const auto clean = clean_run(300, flags);
  ASSERT_EQ(clean.size(), 30u);  // a line every 10 steps
  std::vector<double> step_ms;
  for (const json& m : clean) step_ms.push_back(m["step_time_ms"].get<double>());
  std::nth_element(step_ms.begin(), step_ms.begin() + 15, step_ms.end());
  const double mtti_s = std::max(1.0, 0.030 * step_ms[15]);
  // The second virtual host is lost (tests/e2e/lose_hosts.py) every 4 × mtti_s on average.
  const fs::path losses = dir_ / "host_losses.jsonl", stop = dir_ / "stop_losing_hosts";
  test::run_shell(fmt::format("sh -c 'timeout 900 /usr/bin/python3 {}/tests/e2e/lose_hosts.py 11 {:.2f} {} {} 1 {} {} "
                              ">/dev/null 2>&1 &'",
                              MEGATRAIN_SOURCE_DIR, 4 * mtti_s, (dir_ / "run").string(),
                              (dir_ / "shm" / "vnode1").string(), losses.string(), stop.string()));
  const auto r = drive(fmt::format("random:seed=7:mtti_s={:.2f}:kinds=kill,hang,exc,slow,ckpt_crash", mtti_s), 300,
                       "--max-restarts 60 --no-progress-cycles 6", flags + memory, 480);
  std::ofstream{stop};
  ASSERT_EQ(r.code, 0) << r.output;
  const auto ev = events();
  std::vector<json> lost;
  std::ifstream in(losses);
  for (std::string line; std::getline(in, line);) lost.push_back(json::parse(line));
  EXPECT_GE(lost.size(), 1u) << "no host was lost";
  int fetched = 0;  // restores in which the lost host's ranks took their state from their buddies' copies
  for (const json& m : of(ev, "MEMORY_RESTORE")) fetched += m["fetched"] != "0";
  EXPECT_GE(fetched, 1) << r.output;
  const auto faults = of(ev, "faults");
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_GE(faults[0]["injected"].get<int>(), 5) << r.output;
  EXPECT_EQ(faults[0]["undetected"], json::array()) << r.output;
  const auto end = of(ev, "end")[0];
  EXPECT_EQ(end["productive_steps"], 300);
  // "[m]" keeps the pattern from matching the shell that runs pgrep.
  const auto survivors = test::run_shell("pgrep -fc '[m]egatrain train --config " + config_.string() + "'");
  EXPECT_EQ(survivors.output, "0\n") << "processes outlived the soak";
  expect_equals_clean_run(300, clean);
  int frozen_in_collective = 0;
  for (const json& f : of(ev, "FAULT_INJECTED")) frozen_in_collective += f.value("how", "") == "freeze";
  std::printf("chaos soak (mtti %.2f s): %d faults injected (%d ranks frozen inside a collective) and %zu host losses, "
              "%d detected (%zu cut short), %zu restores from memory (%d fetching a lost host's state from its "
              "buddies), detection mean %.2f s max %.2f s, %d launches, ETTR %.1f%% over %.1f s\n",
              mtti_s, faults[0]["injected"].get<int>(), frozen_in_collective, lost.size(),
              faults[0]["detected"].get<int>(), faults[0]["cut_short"].size(), of(ev, "MEMORY_RESTORE").size(),
              fetched,
              faults[0]["mean_detection_s"].get<double>(), faults[0]["max_detection_s"].get<double>(),
              end["attempts"].get<int>(), 100 * end["ettr"].get<double>(), end["wall_s"].get<double>());
}

}  // namespace
}  // namespace megatrain
