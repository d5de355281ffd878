// Fixture for the checkpoint end-to-end tests (test_checkpoint_*_e2e.cpp): the tiny config of
// TrainE2E with checkpoint flags, runs of the binary in one process or on MPI ranks, and readers
// of what a checkpoint folder holds (`latest`, file bytes, the saved state).
#pragma once
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_file.h"
#include "model/params.h"
#include "tests/e2e/e2e_fixture.h"

namespace megatrain::test {

class CheckpointE2E : public TrainE2E {
 protected:
  // The LR schedule spans 60 steps whatever train.steps is, so short runs share one schedule.
  std::string ckpt(const fs::path& dir, const std::string& extra) {
    return "--set optimizer.decay_steps=60 --set checkpoint.dir='\"" + dir.string() + "\"' " + extra;
  }
  test::Result train_raw(const std::string& extra, const std::string& env = "") {
    return test::run_shell(env + test::megatrain_bin() + " train --config " + config_.string() +
                           " --set optimizer.decay_steps=60 " + extra);
  }
  // `megatrain train` on `np` ranks (one thread each) through mpirun; `prefix` goes first (e.g.
  // file_size_limit's).
  test::Result train_mpi_raw(int np, const std::string& extra, const std::string& prefix = "",
                             const std::string& mpirun_flags = "") {
    return test::run_shell(prefix + "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np " +
                           std::to_string(np) + " -x OMP_NUM_THREADS=1 " + mpirun_flags + " " + test::megatrain_bin() +
                           " train --config " + config_.string() + " --set optimizer.decay_steps=60 " + extra);
  }
  // Parameters and Adam state of a saved checkpoint, read with the tiny config's layout.
  std::vector<float> state_of(const fs::path& step_dir) {
    ModelConfig m;
    m.n_layers = 2;
    m.d_model = 64;
    m.n_heads = 4;
    m.vocab_size = 257;
    m.max_seq_len = 64;
    m.dropout = 0.1f;
    layout_ = gpt_param_layout(m);
    const int64_t n = layout_.total();
    std::vector<float> all(static_cast<size_t>(3 * n));
    checkpoint_file_read((step_dir / "model.h5").string(),
                         checkpoint_tensors_full(layout_, all.data(), all.data() + n, all.data() + 2 * n, 0, 1));
    return all;
  }
  static std::string bytes_of(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static std::string latest_of(const fs::path& dir) {
    std::string name;
    std::ifstream(dir / "latest") >> name;
    return name;
  }
  // The names in a folder, sorted.
  static std::vector<std::string> names_in(const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  ParamLayout layout_;
};

}  // namespace megatrain::test
