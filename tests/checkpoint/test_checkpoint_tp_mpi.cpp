// Checkpoint files under tensor parallelism (run at np 2 and 4): every (tp, dp) layout of the world
// writes, from its tensor-parallel views and ZeRO-3 partitions, the same file — element by element
// and checksum by checksum — as one process writes from the whole model, and a file reads back at
// every (tp, dp) layout, ZeRO-1 and ZeRO-3 slices, with each local element equal to its global
// value and the vocabulary rows a larger tp pads with set to zero. Both model families: GPT-2
// (vocabulary padding differing with tp, tied head) and Llama (key/value heads split at tp = 2,
// replicated at tp = 4 and stored once).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "checkpoint/checkpoint_file.h"
#include "checkpoint/checkpoint_shard.h"
#include "tests/model/tiny_models.h"
#include "tests/shared_temp_dir.h"

namespace megatrain {
namespace {

constexpr float kUntouched = -123.0f;  // what a read leaves in alignment padding

// The value of global element g of stored tensor s (kind 0 params, 1 and 2 the moments): distinct
// for every (kind, tensor, element); zero in vocabulary padding rows.
float global_value(const ParamLayout& stored, int kind, size_t s, int64_t g) {
  const ParamSpec& spec = stored.spec(s);
  if (spec.valid_rows >= 0 && g >= spec.valid_rows * (spec.shape.numel() / spec.shape[0])) return 0.0f;
  return static_cast<float>(kind * 100000 + static_cast<int64_t>(s) * 1000) + static_cast<float>(g % 997) * 0.5f;
}

// What flat element j of a rank's layout must hold.
float local_value(const ParamLayout& layout, const ParamLayout& stored, int kind, int64_t j) {
  for (size_t i = 0; i < layout.size(); ++i) {
    const int64_t e = j - layout.offset(i);
    if (e < 0 || e >= layout.local_shape(i).numel()) continue;
    const size_t s = stored.index_of(layout.spec(i).name);
    const int64_t g = layout.global_index(i, e);
    return g < stored.spec(s).shape.numel() ? global_value(stored, kind, s, g) : 0.0f;
  }
  return kUntouched;
}

enum class Zero { one, three };

// One rank's place: tp rank = world rank % tp, dp rank = world rank / tp, its ZeRO slices.
struct Holding {
  ParamLayout layout;
  const ParamLayout& stored;
  FlatRange part;
  std::vector<float> buf[3];
  FlatSlice slice[3];

  Holding(const ModelConfig& cfg, const ParamLayout& s, int tp, Zero zero) : stored(s) {
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    layout = gpt_param_layout(cfg, TpCoord{rank % tp, tp}, false);
    part = flat_partition(layout.total(), rank / tp, world / tp);
    const FlatRange full{0, layout.total()};
    const FlatRange ranges[3] = {zero == Zero::three ? part : full, part, part};
    for (int k = 0; k < 3; ++k) {
      buf[k].assign(static_cast<size_t>(ranges[k].size()), kUntouched);
      slice[k] = {buf[k].data(), ranges[k].begin, ranges[k].end};
    }
  }
  void fill() {
    for (int k = 0; k < 3; ++k)
      for (int64_t j = slice[k].begin; j < slice[k].end; ++j)
        slice[k].data[j - slice[k].begin] = local_value(layout, stored, k, j);
  }
  CheckpointTensors tensors() const { return {&layout, slice[0], slice[1], slice[2], part.begin, part.end, &stored}; }
  void check(const std::string& what) const {
    for (int k = 0; k < 3; ++k)
      for (int64_t j = slice[k].begin; j < slice[k].end; ++j)
        ASSERT_EQ(slice[k].data[j - slice[k].begin], local_value(layout, stored, k, j))
            << what << ": kind " << k << " flat " << j << " (tp rank " << layout.tp().rank << ")";
  }
};

// Every dataset of `file` holds the global values and a crc32 of them.
void expect_global_file(const std::string& file, const ParamLayout& stored) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0) << file;
  int kind = 0;
  for (const char* group : {"params", "exp_avg", "exp_avg_sq"}) {
    for (size_t s = 0; s < stored.size(); ++s) {
      const std::string name = std::string(group) + "/" + stored.spec(s).name;
      const auto n = static_cast<size_t>(stored.spec(s).shape.numel());
      std::vector<float> got(n), want(n);
      for (size_t g = 0; g < n; ++g) want[g] = global_value(stored, kind, s, static_cast<int64_t>(g));
      const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
      ASSERT_GE(d, 0) << name;
      uint32_t crc = 0;
      const hid_t a = H5Aopen(d, "crc32", H5P_DEFAULT);
      EXPECT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got.data()), 0);
      EXPECT_GE(H5Aread(a, H5T_NATIVE_UINT32, &crc), 0);
      H5Aclose(a);
      H5Dclose(d);
      EXPECT_EQ(got, want) << file << ": " << name;
      EXPECT_EQ(crc, ckpt::crc_floats(want.data(), static_cast<int64_t>(n))) << file << ": " << name;
    }
    ++kind;
  }
  H5Fclose(f);
}

struct Family {
  const char* name;
  ModelConfig cfg;
};

class TpCheckpoint : public ::testing::TestWithParam<Family> {
 protected:
  // The tensor-parallel sizes the world and the model's 4 heads allow.
  static std::vector<int> tps() {
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    std::vector<int> out;
    for (int tp : {1, 2, 4})
      if (world % tp == 0) out.push_back(tp);
    return out;
  }

  test::SharedTempDir dir_{"cktp"};
  CheckpointMeta meta_{{3, 30, 7}, "[model]\n", "{}"};
};

TEST_P(TpCheckpoint, EveryLayoutWritesTheGlobalFileAndReadsItsOwnView) {
  const ModelConfig& cfg = GetParam().cfg;
  const ParamLayout stored = gpt_param_layout(cfg);
  const Comm world = Comm::world();
  for (int tp : tps()) {
    Holding writer(cfg, stored, tp, Zero::three);
    writer.fill();
    const std::string file = dir_ / ("tp" + std::to_string(tp) + ".h5");
    checkpoint_file_write(file, writer.tensors(), meta_, world);
    if (world.rank() == 0) expect_global_file(file, stored);
    for (int read_tp : tps())
      for (Zero zero : {Zero::one, Zero::three}) {
        Holding reader(cfg, stored, read_tp, zero);
        const CheckpointMeta meta = checkpoint_file_read(file, reader.tensors(), world);
        EXPECT_EQ(meta.state.step, 3);
        reader.check("written at tp " + std::to_string(tp) + ", read at tp " + std::to_string(read_tp) +
                     (zero == Zero::one ? " ZeRO-1" : " ZeRO-3"));
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, TpCheckpoint,
                         ::testing::Values(Family{"gpt2", test::gpt2_like()}, Family{"llama", test::llama_like()}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace megatrain
