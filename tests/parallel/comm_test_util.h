// Helpers shared by the test_comm_mpi files: the communicators every test runs on (the world, and
// a split of it whose max_count of 3 forces every operation through the chunked large-count path)
// and the bytes-moved formula of comm.h, restated for the checks.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "parallel/comm.h"

namespace megatrain::comm_test {

inline std::vector<Comm> test_comms() {
  const Comm world = Comm::world();
  return {world, world.split(0, world.rank(), "chunked", CommOptions{.max_count = 3})};
}

inline int64_t total(std::span<const int64_t> counts) { return std::accumulate(counts.begin(), counts.end(), int64_t{0}); }

// Sum of counts[0..j).
inline int64_t displ(std::span<const int64_t> counts, int j) {
  return std::accumulate(counts.begin(), counts.begin() + j, int64_t{0});
}

// The nccl-tests bus-bytes convention of comm.h, per rank.
inline int64_t all_reduce_bytes(int64_t p, int64_t n, int64_t b) { return 2 * (p - 1) * (n * b) / p; }
inline int64_t gather_scatter_bytes(int64_t p, std::span<const int64_t> counts) {
  return (p - 1) * (total(counts) * 4) / p;
}

// Bytes and calls this comm recorded since `before`.
inline void expect_recorded(const Comm& c, const CommStats& before, int64_t bytes, int64_t calls) {
  const CommStats now = c.stats();
  EXPECT_EQ(now.bytes_moved - before.bytes_moved, bytes) << "group " << c.name();
  EXPECT_EQ(now.calls - before.calls, calls) << "group " << c.name();
}

}  // namespace megatrain::comm_test
