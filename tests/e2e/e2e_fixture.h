// Fixture for end-to-end tests: a temp folder with a byte-level dataset made from two of Debian's
// fortune files (train: science, valid: wisdom; from $MEGATRAIN_FORTUNES where it is set) and a
// tiny config, and a helper that trains and returns the metrics file's JSON lines
// (tests/e2e/metrics_reader.h), in one process or on MPI ranks.
#pragma once
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/e2e/metrics_reader.h"
#include "tests/e2e/run_binary.h"
#include "tests/temp_dir.h"

namespace megatrain::test {
namespace fs = std::filesystem;

// The folder of the fortune files `science` and `wisdom`: Debian's (package fortunes), or
// $MEGATRAIN_FORTUNES on a machine without the package (a folder holding copies of the two).
inline fs::path fortunes_dir() {
  const char* dir = std::getenv("MEGATRAIN_FORTUNES");
  return dir != nullptr && *dir != 0 ? fs::path(dir) : fs::path("/usr/share/games/fortunes");
}

// The Llama shape of the parity tests (RoPE, RMSNorm, SwiGLU, no biases, untied, GQA with 2
// key/value heads for 4 query heads), dropout off.
inline constexpr const char* kLlamaFlags =
    "--set model.dropout=0 --set model.norm='\"rmsnorm\"' --set model.position='\"rope\"' "
    "--set model.activation='\"swiglu\"' --set model.bias=false --set model.tie_embeddings=false "
    "--set model.n_kv_heads=2";

class TrainE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(fortunes_dir() / "science") && fs::exists(fortunes_dir() / "wisdom"))
        << "no fortune files science and wisdom in " << fortunes_dir()
        << ": run scripts/setup.sh (Debian package fortunes), or set MEGATRAIN_FORTUNES to a folder holding them";
    for (const auto& [name, file] : {std::pair{"train", "science"}, std::pair{"valid", "wisdom"}}) {
      auto r = test::run_megatrain("preprocess --tokenizer bytes --doc-separator % --input " +
                                   (fortunes_dir() / file).string() + " --output-prefix " + (dir_ / name).string());
      ASSERT_EQ(r.code, 0) << r.output;
    }
    config_ = dir_ / "tiny.toml";
    test::write_file(config_, R"([model]
n_layers = 2
d_model = 64
n_heads = 4
vocab_size = 257
max_seq_len = 64
dropout = 0.1
[train]
seq_len = 64
micro_batch_size = 8
global_batch_size = 16
steps = 60
eval_interval = 20
eval_steps = 2
[optimizer]
lr = 3e-3
min_lr = 3e-4
warmup_steps = 5
[data]
train = ")" + (dir_ / "train").string() + R"("
valid = ")" + (dir_ / "valid").string() + R"("
[log]
interval = 1
)");
  }

  std::vector<nlohmann::json> train(const std::string& extra, const std::string& metrics) {
    auto r = test::run_megatrain("train --config " + config_.string() + " --set log.metrics_file='\"" +
                           (dir_ / metrics).string() + "\"' " + extra);
    EXPECT_EQ(r.code, 0) << r.output;
    return test::metrics_lines(dir_ / metrics);
  }

  // Trains on `np` MPI ranks (one thread each) with `extra` flags; the metrics go to NAME.jsonl,
  // whose JSON lines are returned.
  std::vector<nlohmann::json> train_mpi(int np, const std::string& extra, const std::string& name) {
    const fs::path metrics = dir_ / (name + ".jsonl");
    const std::string cmd = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np " +
                            std::to_string(np) + " -x OMP_NUM_THREADS=1 " + test::megatrain_bin() +
                            " train --config " + config_.string() + " --set log.metrics_file=" + metrics.string() +
                            " " + extra;
    const auto r = test::run_shell(cmd);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.output;
    return test::metrics_lines(metrics);
  }

  // The parity tests' run: `np` ranks for 10 steps, micro-batches of 4 (unless `extra` says
  // otherwise) from a global batch of 16, validation after 5 and 10, small gradient buckets.
  std::vector<nlohmann::json> train_parity(int np, const std::string& extra, const std::string& name) {
    return train_mpi(np,
                     "--set train.steps=10 --set train.micro_batch_size=4 --set train.eval_interval=5 "
                     "--set parallel.bucket_size_mb=0.05 " + extra,
                     name);
  }

  // Trains 10 steps of `extra` (which saves every 5 steps, no evaluation) in one process, and again
  // in two runs of 5 steps, the second resumed from the first's checkpoint: the resumed steps'
  // losses and gradient norms must equal the uninterrupted run's bitwise.
  void expect_bitwise_resume(const std::string& extra) {
    const std::string a = "--set checkpoint.dir='\"" + (dir_ / "resume_a").string() + "\"' ";
    const std::string b = "--set checkpoint.dir='\"" + (dir_ / "resume_b").string() + "\"' ";
    const auto full = train_parity(1, extra + a, "full");
    train_parity(1, extra + b + "--set train.steps=5", "first");
    const auto resumed = train_parity(1, extra + b + "--set checkpoint.load=latest", "resumed");
    EXPECT_EQ(metrics_field(resumed, "loss", 0), metrics_field(full, "loss", 5));
    EXPECT_EQ(metrics_field(resumed, "grad_norm", 0), metrics_field(full, "grad_norm", 5));
    EXPECT_EQ(metrics_field(resumed, "loss", 0).size(), 5u);
  }

  // The bytes of model.safetensors that `megatrain export` writes for CHECKPOINT (a step folder):
  // equal bytes, equal weights.
  std::string exported_weights(const std::string& checkpoint) {
    const fs::path out = dir_ / ("export_" + fs::path(checkpoint).filename().string());
    const auto r = test::run_megatrain("export --checkpoint " + checkpoint + " --out " + out.string());
    EXPECT_EQ(r.code, 0) << r.output;
    std::ifstream in(out / "model.safetensors", std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  test::TempDir dir_{"e2e"};
  fs::path config_;
};

}  // namespace megatrain::test
