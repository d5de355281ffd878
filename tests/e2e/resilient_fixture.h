// Fixture for the resilient driver's end-to-end tests (scripts/megatrain-resilient): the tiny
// model of tests/e2e/e2e_fixture.h trained on ranks_ MPI ranks (4 unless a test says otherwise;
// two ranks per virtual host, MEGATRAIN_RANKS_PER_NODE) at (tp, dp) = (2, ranks_ / 2) unless the
// flags say otherwise, saving every 10 steps, under the driver with faults from MEGATRAIN_FAULT;
// the same run without faults or driver; the driver's events; and the check that a run ended with
// the fault-free run's losses and final weights, bit for bit.
#pragma once
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/e2e/e2e_fixture.h"

namespace megatrain::test {

using json = nlohmann::json;

class ResilientE2E : public test::TrainE2E {
 protected:
  int ranks_ = 4;  // the trainer's MPI ranks
  std::string trainer(int steps) const {
    return "mpirun --oversubscribe -np " + std::to_string(ranks_) + " -x OMP_NUM_THREADS=1 -x MEGATRAIN_RANKS_PER_NODE " +
           test::megatrain_bin() + " train --config " + config_.string() + " --set parallel.tp=2 --set train.eval_interval=0" +
           " --set log.peak_tflops=0 --set health.step_timeout_floor_s=2 --set health.calibrate_steps=3" +
           " --set checkpoint.save_interval=10 --set train.steps=" + std::to_string(steps);
  }
  // The driver over `trainer(steps) extra`, with MEGATRAIN_FAULT = fault.
  test::Result drive(const std::string& fault, int steps, const std::string& driver_flags = "",
                     const std::string& extra = "", int timeout_s = 300, const std::string& launcher = "") {
    return test::run_shell("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MEGATRAIN_RANKS_PER_NODE=2"
                           " MEGATRAIN_FAULT='" + fault + "' " MEGATRAIN_SOURCE_DIR "/scripts/megatrain-resilient"
                           " --checkpoint-dir " + (dir_ / "ckpt").string() + " --run-dir " + (dir_ / "run").string() +
                           " --backoff-s 0.2 --max-backoff-s 1 " + driver_flags + " -- " + launcher + trainer(steps) + " " + extra,
                           timeout_s);
  }
  // The same run without faults or driver, into dir_/clean; its metrics lines.
  std::vector<json> clean_run(int steps, const std::string& extra) {
    const auto r = test::run_shell("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                                   "MEGATRAIN_RANKS_PER_NODE=2 " + trainer(steps) + " " + extra + " --set checkpoint.dir=" +
                                   (dir_ / "clean").string() + " --set log.metrics_file=" +
                                   (dir_ / "clean.jsonl").string());
    EXPECT_EQ(r.code, 0) << r.output;
    return test::metrics_lines(dir_ / "clean.jsonl");
  }
  std::vector<json> events() const {
    std::vector<json> out;
    std::ifstream in(dir_ / "run" / "reports" / "events.jsonl");
    for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
    return out;
  }
  static std::vector<json> of(const std::vector<json>& events, const std::string& name) {
    std::vector<json> out;
    for (const json& e : events)
      if (e["event"] == name) out.push_back(e);
    return out;
  }
  // The final weights equal the fault-free run's, and so do the losses of `steps` (bitwise).
  void expect_equals_clean_run(int steps, const std::vector<json>& clean) {
    const auto got = test::metrics_lines(dir_ / "run" / "metrics.jsonl");
    ASSERT_EQ(got.size(), clean.size());
    EXPECT_EQ(test::compare_runs(clean, got, 0.0, "resilient vs fault-free"), static_cast<int>(clean.size()) * 2);
    const std::string last = fmt::format("/step_{:07d}", steps);
    const std::string a = exported_weights((dir_ / "clean").string() + last);
    EXPECT_GT(a.size(), 1000u);
    EXPECT_TRUE(a == exported_weights((dir_ / "ckpt").string() + last)) << "final weights differ from the fault-free run";
  }
  // The same for any model (an MoE one too, which export does not write): the losses of `steps` and
  // the loss scale of each, and
  // the CRC-32 of every tensor of the final checkpoint — parameters and both moments — as its
  // manifest records them (docs/checkpoint-format.md), bit for bit.
  void expect_state_equals_clean_run(int steps, const std::vector<json>& clean) {
    const auto got = test::metrics_lines(dir_ / "run" / "metrics.jsonl");
    ASSERT_EQ(got.size(), clean.size());
    EXPECT_EQ(test::compare_runs(clean, got, 0.0, "resilient vs fault-free"), static_cast<int>(clean.size()) * 2);
    for (size_t i = 0; i < clean.size(); ++i)  // fp16: the loss scaler's state came back with the rest
      EXPECT_EQ(clean[i].value("loss_scale", json()), got[i].value("loss_scale", json())) << "step " << clean[i]["step"];
    const auto tensors = [&](const char* dir) {
      std::ifstream in(dir_ / dir / fmt::format("step_{:07d}", steps) / "manifest.json");
      return json::parse(in, nullptr, false)["files"]["model.h5"]["tensors"];
    };
    const json want = tensors("clean"), have = tensors("ckpt");
    ASSERT_TRUE(want.is_object() && want.size() > 10u) << want.dump();
    for (const auto& [name, crc] : want.items()) EXPECT_EQ(have.value(name, json()), crc) << name;
    EXPECT_EQ(have.size(), want.size());
  }
};

}  // namespace megatrain::test
