// Sharded checkpoint I/O at P ranks (run at np 1, 3, 4): a file written from ZeRO-3-style partition
// slices equals, element by element and checksum by checksum, one written by a single rank from full
// buffers, and it reads back at P ranks (ZeRO-3 and ZeRO-1 slices), at P − 1 ranks and in one
// process; a read fills exactly the slices (padding and memory around untouched). A damaged file, or
// an error seen by one rank only, is the same InputError on every rank — never a hang.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "checkpoint/checkpoint_file.h"
#include "checkpoint/checkpoint_shard.h"
#include "tests/input_error.h"
#include "tests/shared_temp_dir.h"

namespace megatrain {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kGuard = 5;           // floats of memory around each slice that a read must not touch
constexpr float kUntouched = -123.0f;   // what a read leaves in padding and guards
constexpr float kPadding = -7.0f;       // padding in written buffers (not stored in the file)

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// 1-D, 2-D and 3-D tensors; total = 176 floats (a multiple of 16, as every layout, but not of 3),
// and the partitions at 3 and 4 ranks cut rows of the 2-D and 3-D tensors in the middle.
ParamLayout test_layout(bool extra = false) {
  std::vector<ParamSpec> specs{{"a", Shape{6}}, {"w", Shape{9, 6}}, {"c", Shape{2, 3, 5}}, {"b", Shape{5}},
                               {"e", Shape{3, 11}}};
  if (extra) specs.push_back({"extra", Shape{4}});
  return ParamLayout(specs, TpCoord{});
}

bool in_tensor(const ParamLayout& layout, int64_t flat) {
  for (size_t i = 0; i < layout.size(); ++i)
    if (flat >= layout.offset(i) && flat < layout.offset(i) + layout.spec(i).shape.numel()) return true;
  return false;
}

float expected(int kind, int64_t flat) { return static_cast<float>((kind + 1) * 1000 + flat) + 0.25f; }

// What one rank holds: three slices, each with kGuard floats of untouchable memory on both sides.
struct Holding {
  const ParamLayout& layout;
  FlatRange part;
  std::vector<float> buf[3];
  FlatSlice slice[3];

  Holding(const ParamLayout& l, FlatRange partition, const FlatRange (&ranges)[3]) : layout(l), part(partition) {
    for (int k = 0; k < 3; ++k) {
      buf[k].assign(static_cast<size_t>(ranges[k].end - ranges[k].begin + 2 * kGuard), kUntouched);
      slice[k] = {buf[k].data() + kGuard, ranges[k].begin, ranges[k].end};
    }
  }
  void fill() {
    for (int k = 0; k < 3; ++k)
      for (int64_t j = slice[k].begin; j < slice[k].end; ++j)
        slice[k].data[j - slice[k].begin] = in_tensor(layout, j) ? expected(k, j) : kPadding;
  }
  CheckpointTensors tensors() const { return {&layout, slice[0], slice[1], slice[2], part.begin, part.end}; }
  // Every held tensor element as written, everything else untouched.
  void check(const std::string& what) const {
    for (int k = 0; k < 3; ++k)
      for (size_t i = 0; i < buf[k].size(); ++i) {
        const int64_t j = slice[k].begin + static_cast<int64_t>(i) - kGuard;
        const bool held = j >= slice[k].begin && j < slice[k].end;
        const float want = held && in_tensor(layout, j) ? expected(k, j) : kUntouched;
        ASSERT_EQ(buf[k][i], want) << what << ": kind " << k << " flat " << j << " on rank " << world_rank();
      }
  }
};

// ZeRO-3: every slice is the partition. ZeRO-1: full params, partition moments.
enum class Zero { one, three };
Holding holding(const ParamLayout& layout, FlatRange part, Zero zero) {
  const FlatRange full{0, layout.total()};
  return Holding(layout, part, {zero == Zero::three ? part : full, part, part});
}

// Partitions at P ranks: the standard one, or with rank 1 holding nothing (any tiling is allowed).
enum class Scheme { standard, empty_rank };
FlatRange partition(int64_t total, int rank, int ranks, Scheme scheme) {
  if (scheme == Scheme::standard || ranks < 2) return flat_partition(total, rank, ranks);
  if (rank == 1) return {flat_partition(total, 0, ranks - 1).end, flat_partition(total, 0, ranks - 1).end};
  return flat_partition(total, rank == 0 ? 0 : rank - 1, ranks - 1);
}

class ShardedCheckpoint : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_ / name; }

  // ZeRO-3 write on `comm`: every rank passes only its partition.
  void write_zero3(const std::string& file, const Comm& comm, Scheme scheme) {
    Holding h = holding(layout_, partition(layout_.total(), comm.rank(), comm.size(), scheme), Zero::three);
    h.fill();
    checkpoint_file_write(file, h.tensors(), meta_, comm);
  }
  // Rank 0 alone writes from full buffers: the reference.
  void write_reference(const std::string& file) {
    const Comm world = Comm::world();
    const Comm alone = world.split(world.rank() == 0 ? 0 : 1, world.rank(), "alone");
    if (world.rank() == 0) {
      Holding h(layout_, {0, layout_.total()}, {{0, layout_.total()}, {0, layout_.total()}, {0, layout_.total()}});
      h.fill();
      checkpoint_file_write(file, h.tensors(), meta_, alone);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  void read_and_check(const std::string& file, const Comm& comm, Scheme scheme, Zero zero, const std::string& what) {
    Holding h = holding(layout_, partition(layout_.total(), comm.rank(), comm.size(), scheme), zero);
    const CheckpointMeta meta = checkpoint_file_read(file, h.tensors(), comm);
    EXPECT_EQ(meta.state.step, 5);
    h.check(what);
  }
  // The message every rank got (a test failure where one got none), checked to be the same on all ranks.
  std::string read_error(const std::string& file, const ParamLayout& layout, const CheckpointMetaCheck& check = {}) {
    const Comm world = Comm::world();
    Holding h = holding(layout, flat_partition(layout.total(), world.rank(), world.size()), Zero::three);
    const std::string error = test::input_error_of([&] { checkpoint_file_read(file, h.tensors(), world, check); });
    const int n = static_cast<int>(error.size());
    int bounds[2] = {n, -n};  // min and −max of the lengths
    MPI_Allreduce(MPI_IN_PLACE, bounds, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    EXPECT_EQ(bounds[0], -bounds[1]) << "ranks disagree: " << error;
    if (bounds[0] != -bounds[1]) return error;
    std::vector<char> all(error.size() * static_cast<size_t>(world.size()));
    MPI_Allgather(error.data(), n, MPI_CHAR, all.data(), n, MPI_CHAR, MPI_COMM_WORLD);
    for (int r = 0; r < world.size(); ++r)
      EXPECT_EQ(std::string(all.data() + static_cast<size_t>(r * n), static_cast<size_t>(n)), error) << "rank " << r;
    return error;
  }

  ParamLayout layout_ = test_layout();
  CheckpointMeta meta_{{5, 50, 9}, "[model]\n", "{}"};
  test::SharedTempDir dir_{"ckshard"};
};

// Every dataset of `file` equals `ref`'s: the same floats and the same crc32 attribute, and that
// crc32 is the CRC of the whole tensor as it was written.
void expect_same_file(const std::string& file, const std::string& ref, const ParamLayout& layout) {
  const hid_t a = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), b = H5Fopen(ref.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  int kind = 0;
  for (const char* group : {"params", "exp_avg", "exp_avg_sq"}) {
    for (size_t i = 0; i < layout.size(); ++i) {
      const std::string name = std::string(group) + "/" + layout.spec(i).name;
      const auto n = static_cast<size_t>(layout.spec(i).shape.numel());
      std::vector<float> x(n), y(n), want(n);
      uint32_t cx = 0, cy = 1;
      for (auto [f, v, c] : {std::tuple{a, &x, &cx}, std::tuple{b, &y, &cy}}) {
        const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
        ASSERT_GE(d, 0) << name;
        ASSERT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v->data()), 0);
        const hid_t attr = H5Aopen(d, "crc32", H5P_DEFAULT);
        ASSERT_GE(H5Aread(attr, H5T_NATIVE_UINT32, c), 0);
        H5Aclose(attr);
        H5Dclose(d);
      }
      for (size_t j = 0; j < n; ++j) want[j] = expected(kind, layout.offset(i) + static_cast<int64_t>(j));
      EXPECT_EQ(x, want) << name;
      EXPECT_EQ(y, want) << name;
      EXPECT_EQ(cx, cy) << name;
      EXPECT_EQ(cx, ckpt::crc_floats(want.data(), static_cast<int64_t>(n))) << name;
    }
    ++kind;
  }
  H5Fclose(a);
  H5Fclose(b);
}

TEST_F(ShardedCheckpoint, WrittenFromPartitionsReadsBackAtAnyRankCount) {
  const Comm world = Comm::world();
  const int p = world.size(), q = std::max(p - 1, 1);
  write_reference(path("reference.h5"));
  // The ranks 0 … q − 1 as a communicator of their own (q = P − 1, or 1 alone); the others idle.
  const bool in_fewer = world.rank() < q;
  const Comm fewer_ranks = world.split(in_fewer ? 0 : 1, world.rank(), "fewer");
  for (Scheme scheme : {Scheme::standard, Scheme::empty_rank}) {
    const std::string what = scheme == Scheme::standard ? "standard" : "empty rank";
    const std::string file = path(what + ".h5");
    write_zero3(file, world, scheme);
    if (world.rank() == 0) expect_same_file(file, path("reference.h5"), layout_);
    read_and_check(file, world, scheme, Zero::three, what + ": ZeRO-3 at P");
    read_and_check(file, world, scheme, Zero::one, what + ": ZeRO-1 at P");
    if (in_fewer) read_and_check(file, fewer_ranks, scheme, Zero::one, what + ": ZeRO-1 at P - 1");
    {  // every rank alone, full buffers
      Holding full(layout_, {0, layout_.total()}, {{0, layout_.total()}, {0, layout_.total()}, {0, layout_.total()}});
      checkpoint_file_read(file, full.tensors());
      full.check(what + ": full buffers in one process");
    }
    // Written at P − 1 ranks, read at P.
    const std::string fewer = path(what + "_fewer.h5");
    if (in_fewer) write_zero3(fewer, fewer_ranks, scheme);
    MPI_Barrier(MPI_COMM_WORLD);
    if (world.rank() == 0) expect_same_file(fewer, path("reference.h5"), layout_);
    read_and_check(fewer, world, scheme, Zero::three, what + ": written at P - 1, read at P");
  }
}

TEST_F(ShardedCheckpoint, DamageIsTheSameErrorOnEveryRank) {
  const Comm world = Comm::world();
  const std::string file = path("damaged.h5");
  write_zero3(file, world, Scheme::standard);
  read_and_check(file, world, Scheme::standard, Zero::three, "undamaged");
  // A rank-local refusal (here only the last rank's) reaches every rank.
  const std::string refused = read_error(file, layout_, [&](const CheckpointMeta&) {
    if (world.rank() == world.size() - 1) throw InputError("rank-local refusal");
  });
  EXPECT_EQ(refused, "rank-local refusal");
  const std::string missing = read_error(file, test_layout(true));
  EXPECT_NE(missing.find(file), std::string::npos) << missing;
  EXPECT_NE(missing.find("params/extra is missing"), std::string::npos) << missing;
  // One flipped byte in the last element of exp_avg_sq/e, which the last rank's partition holds.
  if (world.rank() == 0) {
    const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, "exp_avg_sq/e", H5P_DEFAULT);
    const haddr_t at = H5Dget_offset(d) + 4 * 32 + 1;
    H5Dclose(d);
    H5Fclose(f);
    std::fstream out(file, std::ios::in | std::ios::out | std::ios::binary);
    out.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    out.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    out.seekp(static_cast<std::streamoff>(at));
    out.write(&c, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string bad = read_error(file, layout_);
  EXPECT_NE(bad.find(file), std::string::npos) << bad;
  EXPECT_NE(bad.find("tensor exp_avg_sq/e fails its checksum"), std::string::npos) << bad;
  // Truncated.
  if (world.rank() == 0) fs::resize_file(file, 1000);
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string truncated = read_error(file, layout_);
  EXPECT_NE(truncated.find("truncated"), std::string::npos) << truncated;
}

}  // namespace
}  // namespace megatrain

// MPI around GoogleTest: every rank runs every test in the same order; only rank 0 prints progress.
int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  ::testing::InitGoogleTest(&argc, argv);
  if (megatrain::world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
