// Multi-rank tests (np 1, 2, 3, 4, 8) of Comm's collectives against results computed from rank
// numbers: rank r contributes r·1000 + i at index i (exact in every element type used; all_reduce's
// max uses values whose maximum moves from rank to rank with i). Sizes
// include 0, sizes not divisible by p and zero counts for some ranks; each test runs on the world
// and on a communicator whose max_count of 3 forces the chunked large-count path. Each call's
// bytes_moved is checked against the formula of comm.h.
#include <gtest/gtest.h>

#include <vector>

#include "comm_test_util.h"
#include "kernels/half.h"
#include "parallel/comm_gather.h"

namespace megatrain {
namespace {

using comm_test::displ;
using comm_test::expect_recorded;
using comm_test::test_comms;
using comm_test::total;

// Count patterns for p ranks: unequal with zeros (every third rank from 1 gives none), all equal,
// and all zero.
std::vector<std::vector<int64_t>> count_patterns(int p) {
  std::vector<int64_t> unequal, equal(static_cast<size_t>(p), 5), zero(static_cast<size_t>(p), 0);
  for (int j = 0; j < p; ++j) unequal.push_back(j % 3 == 1 ? 0 : j + 2);
  return {unequal, equal, zero};
}

template <class T>
void check_all_reduce(const Comm& c) {
  const int p = c.size(), r = c.rank();
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{2 * p + 1}, int64_t{1000 + p}}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      std::vector<T> data(static_cast<size_t>(n));
      // For max, element i's largest value sits on rank (p − 1 − i) mod p, so every rank holds the
      // maximum of some elements; the values are negative for many (all of them at p = 1).
      for (int64_t i = 0; i < n; ++i)
        data[i] = static_cast<T>(op == ReduceOp::sum ? r * 1000 + i : (r + i) % p * 1000 - 500 * p - i);
      const CommStats before = c.stats();
      c.all_reduce(data.data(), n, op).wait();
      expect_recorded(c, before, comm_test::all_reduce_bytes(p, n, sizeof(T)), 1);
      for (int64_t i = 0; i < n; ++i) {
        const T want = op == ReduceOp::sum ? static_cast<T>(1000 * p * (p - 1) / 2 + p * i)
                                           : static_cast<T>((p - 1) * 1000 - 500 * p - i);
        ASSERT_EQ(data[i], want) << c.name() << " n " << n << " i " << i;
      }
    }
  }
}

TEST(CommCollectives, AllReduceEveryTypeSumAndMax) {
  for (const Comm& c : test_comms()) {
    check_all_reduce<float>(c);
    check_all_reduce<double>(c);
    check_all_reduce<int32_t>(c);
    check_all_reduce<int64_t>(c);
  }
}

TEST(CommCollectives, ReduceScatterUnequalAndZeroCounts) {
  for (const Comm& c : test_comms()) {
    const int p = c.size(), r = c.rank();
    for (const auto& counts : count_patterns(p)) {
      std::vector<float> in(static_cast<size_t>(total(counts)));
      for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<float>(r * 1000 + static_cast<int64_t>(k));
      std::vector<float> out(static_cast<size_t>(counts[r]), -1.0f);
      const CommStats before = c.stats();
      c.reduce_scatter(out.data(), in.data(), counts).wait();
      expect_recorded(c, before, comm_test::gather_scatter_bytes(p, counts), 1);
      const int64_t d = displ(counts, r);
      for (int64_t i = 0; i < counts[r]; ++i)
        ASSERT_EQ(out[i], static_cast<float>(1000 * p * (p - 1) / 2 + p * (d + i))) << c.name() << " i " << i;
    }
  }
}

TEST(CommCollectives, AllGatherUnequalZeroAndInPlace) {
  for (const Comm& c : test_comms()) {
    const int p = c.size(), r = c.rank();
    for (const auto& counts : count_patterns(p)) {
      for (bool in_place : {false, true}) {
        std::vector<float> out(static_cast<size_t>(total(counts)), -1.0f);
        std::vector<float> mine(static_cast<size_t>(counts[r]));
        for (int64_t i = 0; i < counts[r]; ++i) mine[i] = static_cast<float>(r * 1000 + i);
        const float* in = mine.data();
        if (in_place) {
          std::copy(mine.begin(), mine.end(), out.begin() + displ(counts, r));
          in = out.data() + displ(counts, r);
        }
        const CommStats before = c.stats();
        c.all_gather(out.data(), in, counts).wait();
        expect_recorded(c, before, comm_test::gather_scatter_bytes(p, counts), 1);
        for (int j = 0; j < p; ++j)
          for (int64_t i = 0; i < counts[j]; ++i)
            ASSERT_EQ(out[displ(counts, j) + i], static_cast<float>(j * 1000 + i))
                << c.name() << " from " << j << " i " << i << " in_place " << in_place;
      }
    }
  }
}

TEST(CommCollectives, AllToAllWithZeroEntries) {
  for (const Comm& c : test_comms()) {
    const int p = c.size(), r = c.rank();
    for (int64_t scale : {1, 5}) {
      // Rank s sends ((s + 2t) % 3)·scale floats to rank t; element i from s to t is s·1000 + t·10 + i.
      auto count = [&](int s, int t) { return ((s + 2 * t) % 3) * scale; };
      std::vector<int64_t> send_counts, recv_counts;
      for (int j = 0; j < p; ++j) {
        send_counts.push_back(count(r, j));
        recv_counts.push_back(count(j, r));
      }
      std::vector<float> in, out(static_cast<size_t>(total(recv_counts)), -1.0f);
      for (int j = 0; j < p; ++j)
        for (int64_t i = 0; i < send_counts[j]; ++i) in.push_back(static_cast<float>(r * 1000 + j * 10 + i));
      const CommStats before = c.stats();
      c.all_to_all(out.data(), recv_counts, in.data(), send_counts).wait();
      expect_recorded(c, before, (total(send_counts) - send_counts[r]) * 4, 1);
      for (int j = 0; j < p; ++j)
        for (int64_t i = 0; i < recv_counts[j]; ++i)
          ASSERT_EQ(out[displ(recv_counts, j) + i], static_cast<float>(j * 1000 + r * 10 + i))
              << c.name() << " from " << j << " i " << i;
    }
  }
}

template <class T>
void check_broadcast(const Comm& c) {
  const int p = c.size(), r = c.rank();
  for (int root = 0; root < p; ++root) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{10}}) {
      std::vector<T> data(static_cast<size_t>(n), T(0));
      if (r == root)
        for (int64_t i = 0; i < n; ++i) data[i] = static_cast<T>(root * 20 + i);
      const CommStats before = c.stats();
      c.broadcast(data.data(), n, root).wait();
      expect_recorded(c, before, p > 1 ? n * static_cast<int64_t>(sizeof(T)) : 0, 1);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(data[i], static_cast<T>(root * 20 + i)) << c.name() << " root " << root;
    }
  }
}

TEST(CommCollectives, BroadcastFromEveryRoot) {
  for (const Comm& c : test_comms()) {
    check_broadcast<float>(c);
    check_broadcast<int64_t>(c);
    check_broadcast<uint8_t>(c);
  }
}

}  // namespace
}  // namespace megatrain

namespace megatrain {
namespace {

// Bf16 sums (comm.h): small integers add exactly in bfloat16, so every rank count and the chunked
// path give the exact sum; 16-bit elements move 2 bytes each; two ranks' sum is one float32
// addition rounded to the nearest bfloat16 (ties to even); uint16_t gathers move the bits untouched.
TEST(CommCollectives, Bf16SumsAndUint16Gathers) {
  for (const Comm& c : comm_test::test_comms()) {
    const int p = c.size(), r = c.rank();
    for (const auto& counts : count_patterns(p)) {
      const int64_t n = comm_test::total(counts);
      std::vector<Bf16> in(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) in[static_cast<size_t>(k)].bits = float_to_bf16(static_cast<float>(r + k % 8));
      const auto want = [&](int64_t k) { return static_cast<float>(p * (p - 1) / 2 + p * (k % 8)); };
      std::vector<Bf16> all = in;
      CommStats before = c.stats();
      c.all_reduce(all.data(), n).wait();
      comm_test::expect_recorded(c, before, comm_test::all_reduce_bytes(p, n, 2), 1);
      for (int64_t k = 0; k < n; ++k) ASSERT_EQ(bf16_to_float(all[static_cast<size_t>(k)].bits), want(k)) << k;
      std::vector<Bf16> mine(static_cast<size_t>(counts[r]));
      before = c.stats();
      c.reduce_scatter(mine.data(), in.data(), counts).wait();
      comm_test::expect_recorded(c, before, (p - 1) * (n * 2) / p, 1);
      const int64_t d = comm_test::displ(counts, r);
      for (int64_t i = 0; i < counts[r]; ++i)
        ASSERT_EQ(bf16_to_float(mine[static_cast<size_t>(i)].bits), want(d + i)) << c.name() << " i " << i;
      std::vector<uint16_t> bits(static_cast<size_t>(n)), own(static_cast<size_t>(counts[r]));
      for (int64_t i = 0; i < counts[r]; ++i) own[static_cast<size_t>(i)] = static_cast<uint16_t>(0xff00 + r * 7 + i);
      c.all_gather(bits.data(), own.data(), counts).wait();
      for (int j = 0; j < p; ++j)
        for (int64_t i = 0; i < counts[j]; ++i)
          ASSERT_EQ(bits[static_cast<size_t>(comm_test::displ(counts, j) + i)], 0xff00 + j * 7 + i) << j << " " << i;
    }
    if (p != 2) continue;
    Bf16 x{float_to_bf16(r == 0 ? 1.0f : 0x1p-8f)};  // 1 + 2^-8 lies halfway between bf16 1 and 1 + 2^-7
    c.all_reduce(&x, 1).wait();
    EXPECT_EQ(bf16_to_float(x.bits), 1.0f) << "the tie rounds to even";
    Bf16 y{float_to_bf16(r == 0 ? 1.0f : 0x3p-9f)};  // 1 + 0.75 · 2^-7 rounds up to 1 + 2^-7
    c.all_reduce(&y, 1).wait();
    EXPECT_EQ(bf16_to_float(y.bits), 1.0f + 0x1p-7f) << "rounded to nearest";
  }
}

// all_gather_text: each rank's text whole, whatever its length (0 on rank 0; over 255 bytes, the
// width of the fixed slots an earlier version cut every text to, from rank 2 on), with NUL bytes kept.
TEST(CommCollectives, AllGatherTextCarriesEveryRanksWholeText) {
  for (const Comm& c : test_comms()) {
    const auto text_of = [](int r) {
      std::string t(static_cast<size_t>(r * 200), 'a');
      for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<char>('a' + (r + i) % 26);
      if (!t.empty()) t[t.size() / 2] = '\0';
      return t;
    };
    const std::vector<std::string> all = all_gather_text(c, text_of(c.rank()));
    ASSERT_EQ(static_cast<int>(all.size()), c.size());
    for (int r = 0; r < c.size(); ++r) EXPECT_EQ(all[static_cast<size_t>(r)], text_of(r)) << "rank " << r;
  }
}

}  // namespace
}  // namespace megatrain
