// A checkpoint file reads back every parameter and both Adam moments bit for bit, and the training
// state. Damaged or mismatched checkpoint files are refused with the file, the tensor and the reason:
// a tensor the model needs is missing, a shape differs, the format version is unknown. The geometry
// of sharded I/O: a flat range is exactly its hyperslab boxes.
// (Truncation, checksums, fallback and resume are covered end to end in tests/e2e; many ranks in
// test_checkpoint_sharded_mpi.cpp.)
#include <gtest/gtest.h>
#include <hdf5.h>

#include <bit>
#include <cstdint>
#include <numeric>

#include "checkpoint/checkpoint_file.h"
#include "checkpoint/checkpoint_shard.h"
#include "tests/input_error.h"
#include "tests/temp_dir.h"

namespace megatrain {
namespace {

ModelConfig tiny() {
  ModelConfig m;
  m.n_layers = 1;
  m.d_model = 16;
  m.n_heads = 2;
  m.vocab_size = 40;
  m.max_seq_len = 8;
  return m;
}

struct Saved {
  ParamLayout layout;
  FlatBuffer p, m, v;
  explicit Saved(const ModelConfig& cfg)
      : layout(gpt_param_layout(cfg)), p(layout.total()), m(layout.total()), v(layout.total()) {}
  // Every element of the three buffers different and non-zero: element i of parameters, exp_avg and
  // exp_avg_sq has the float bits base + 3i + k (k = 0, 1, 2), with the bases in disjoint ranges
  // (positive parameters near 0.1, negative first moments, tiny positive second moments).
  void fill() {
    const uint32_t base[3] = {0x3dcccccdu, 0xba000000u, 0x33000000u};
    float* buffers[3] = {p.data(), m.data(), v.data()};
    for (uint32_t k = 0; k < 3; ++k)
      for (int64_t i = 0; i < layout.total(); ++i)
        buffers[k][i] = std::bit_cast<float>(base[k] + 3 * static_cast<uint32_t>(i) + k);
  }
  CheckpointTensors tensors() { return checkpoint_tensors_full(layout, p.data(), m.data(), v.data(), 0, 1); }
};

class CheckpointFile : public ::testing::Test {
 protected:
  void SetUp() override {
    Saved s(tiny());
    s.fill();
    checkpoint_file_write(path_, s.tensors(), CheckpointMeta{{7, 70, 11}, "[model]\n", "{}"}, Comm::world());
  }

  std::string read_error(const ModelConfig& cfg) {
    Saved s(cfg);
    return test::input_error_of([&] { checkpoint_file_read(path_, s.tensors()); });
  }

  test::TempDir dir_{"ckfile"};
  std::string path_ = (dir_ / "model.h5").string();
};

TEST_F(CheckpointFile, RoundTripsEveryTensorAndTheState) {
  Saved want(tiny()), got(tiny());
  want.fill();
  const CheckpointMeta meta = checkpoint_file_read(path_, got.tensors());
  EXPECT_EQ(meta.state.step, 7);
  EXPECT_EQ(meta.state.consumed_samples, 70);
  EXPECT_EQ(meta.state.seed, 11u);
  EXPECT_EQ(meta.config_toml, "[model]\n");
  const struct {
    const char* name;
    const FlatBuffer &got, &want;
  } buffers[] = {{"params", got.p, want.p}, {"exp_avg", got.m, want.m}, {"exp_avg_sq", got.v, want.v}};
  for (const auto& b : buffers)
    for (int64_t i = 0; i < want.layout.total(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(b.got.data()[i]), std::bit_cast<uint32_t>(b.want.data()[i]))
          << b.name << " flat element " << i;
}

TEST_F(CheckpointFile, MissingTensorIsNamed) {
  ModelConfig untied = tiny();
  untied.tie_embeddings = false;  // needs lm_head.weight, which the file does not have
  const std::string e = read_error(untied);
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("params/lm_head.weight is missing"), std::string::npos) << e;
}

TEST_F(CheckpointFile, WrongShapeIsNamed) {
  ModelConfig longer = tiny();
  longer.max_seq_len = 16;  // embed.wpe becomes (16, 16)
  const std::string e = read_error(longer);
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("params/embed.wpe has shape (8, 16), the model expects (16, 16)"), std::string::npos) << e;
}

TEST_F(CheckpointFile, UnknownFormatVersionIsRefused) {
  {
    const hid_t f = H5Fopen(path_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
    const int64_t v = 99;
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT64, &v), 0);
    H5Aclose(a);
    H5Fclose(f);
  }
  const std::string e = read_error(tiny());
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("format version 99 is not supported"), std::string::npos) << e;
}

// Every element of [lo, hi), in order, once: the boxes concatenated in row-major order.
TEST(RangeBoxes, AreExactlyTheRangeInOrder) {
  for (const Shape& shape : {Shape{7}, Shape{5, 3}, Shape{2, 3, 5}, Shape{2, 3, 2, 4}}) {
    const int64_t n = shape.numel();
    for (int64_t lo = 0; lo <= n; ++lo)
      for (int64_t hi = lo; hi <= n; ++hi) {
        const std::vector<ckpt::Box> boxes = ckpt::range_boxes(shape, lo, hi);
        EXPECT_LE(static_cast<int>(boxes.size()), 2 * shape.ndim - 1) << shape.str() << " " << lo << " " << hi;
        std::vector<int64_t> got;
        for (const ckpt::Box& b : boxes) {
          std::array<int64_t, Shape::kMaxDims> i{};
          int64_t size = 1;
          for (int d = 0; d < shape.ndim; ++d) size *= b.count[static_cast<size_t>(d)];
          for (int64_t k = 0; k < size; ++k) {
            int64_t rest = k, flat = 0;
            for (int d = shape.ndim - 1; d >= 0; --d) {
              const auto u = static_cast<size_t>(d);
              i[u] = b.start[u] + rest % b.count[u];
              rest /= b.count[u];
            }
            for (int d = 0; d < shape.ndim; ++d) flat = flat * shape[d] + i[static_cast<size_t>(d)];
            got.push_back(flat);
          }
        }
        std::vector<int64_t> want(static_cast<size_t>(hi - lo));
        std::iota(want.begin(), want.end(), lo);
        EXPECT_EQ(got, want) << shape.str() << " [" << lo << ", " << hi << ")";
      }
  }
}

}  // namespace
}  // namespace megatrain
