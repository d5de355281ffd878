// ZeroState's ZeRO++ parts ([Note: ZeRO++] in parallel/zero.h): qwZ's quantized parameter
// gathers, qgZ's quantized gradient exchange, hpZ's secondary shards and their group.
#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>

#include "parallel/block_quant.h"
#include "parallel/zero.h"

namespace megatrain {
namespace {

int64_t sum_of(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

std::vector<int64_t> packed_bytes_each(const std::vector<int64_t>& counts, int64_t block) {
  std::vector<int64_t> out;
  for (const int64_t n : counts) out.push_back(quant_packed_bytes(n, block));
  return out;
}

// Throws unless every rank of `group` runs on this rank's host.
void check_one_host(const Comm& group, int k) {
  constexpr size_t kName = 64;
  std::array<uint8_t, kName> mine{};
  const std::string host = host_name();
  std::memcpy(mine.data(), host.data(), std::min(host.size(), kName - 1));
  std::vector<uint8_t> all(kName * static_cast<size_t>(group.size()));
  group.all_gather(all.data(), mine.data(), std::vector<int64_t>(static_cast<size_t>(group.size()), kName)).wait();
  for (int r = 0; r < group.size(); ++r) {
    const std::string other(reinterpret_cast<const char*>(all.data() + kName * static_cast<size_t>(r)));
    MT_INPUT_CHECK(other == std::string(reinterpret_cast<const char*>(mine.data())),
                   "parallel.zero_hpz_partition_size = {}: a group of {} consecutive data-parallel ranks spans hosts "
                   "'{}' and '{}', but hpZ's groups must each lie on one host; use a divisor of the ranks per host",
                   k, k, host, other);
  }
}

}  // namespace

void ZeroState::zeropp_init() {
  const int64_t block = opt_.quant_block;
  MT_CHECK(!opt_.quantized_weights || (opt_.stage >= 1 && !sixteen_bit()),
           "ZeRO++ qwZ needs stage 1–3 and float32 parameters (stage {}, {})", opt_.stage, precision_name(opt_.params));
  MT_CHECK(!opt_.quantized_gradients ||
               (opt_.stage >= 1 && opt_.grad_reduce == Precision::fp32 && opt_.compression == GradCompression::none),
           "ZeRO++ qgZ needs stage 1–3, float32 reduction and no gradient compression");
  MT_CHECK(block >= 1, "ZeRO++ quantization block {} (≥ 1)", block);
  if (opt_.quantized_weights && opt_.stage < 3) {
    part_quant_ = packed_bytes_each(part_counts_, block);
    quantized_.assign(static_cast<size_t>(sum_of(part_quant_)), 0);
  }
  if (opt_.quantized_weights && opt_.stage == 3) {
    int64_t at = 0;
    for (const std::vector<int64_t>& counts : unit_counts_) {
      unit_quant_.push_back(packed_bytes_each(counts, block));
      unit_quant_at_.push_back(at);
      at += unit_quant_.back()[static_cast<size_t>(dp_.rank())];
      unit_quant_most_ = std::max(unit_quant_most_, sum_of(unit_quant_.back()));
    }
    quantized_.assign(static_cast<size_t>(at), 0);
  }
  if (!hpz()) return;
  const int k = opt_.hpz_partition_size;
  MT_CHECK(opt_.stage == 3 && dp_.size() % k == 0,
           "ZeRO++ hpZ needs stage 3 and a partition size that divides the {} data-parallel ranks (stage {}, size {})",
           dp_.size(), opt_.stage, k);
  hpz_ = dp_.split(dp_.rank() / k, dp_.rank(), dp_.name() + ".hpz");
  check_one_host(hpz_, k);
  int64_t at = 0;
  for (const FlatRange& u : units_) {
    std::vector<int64_t> counts;
    for (int j = 0; j < k; ++j) counts.push_back(flat_partition(u.size(), j, k).size());
    secondary_at_.push_back(at);
    at += counts[static_cast<size_t>(hpz_.rank())];
    secondary_counts_.push_back(std::move(counts));
  }
  secondary_ = FlatBuffer(at);
  secondary_valid_.assign(units_.size(), false);
}

// Stages 1–2: this rank's packed partition goes in place into the concatenation of every rank's,
// which is gathered and dequantized into the full parameters. Stage 3: each unit's part is packed
// into the quantized shard, gathered unit by unit later.
void ZeroState::publish_quantized() {
  const int64_t block = opt_.quant_block;
  const float* masters = masters_.data();
  if (opt_.stage == 3) {
    for (size_t u = 0; u < units_.size(); ++u) {
      const FlatRange mine = flat_intersect(units_[u], part_);
      if (mine.size() > 0)
        quant_pack(quantized_.data() + unit_quant_at_[u], masters + (mine.begin - part_.begin), mine.size(), block);
    }
    return;
  }
  const int p = dp_.size(), me = dp_.rank();
  std::vector<int64_t> at(static_cast<size_t>(p) + 1, 0);
  for (int k = 0; k < p; ++k) at[static_cast<size_t>(k) + 1] = at[static_cast<size_t>(k)] + part_quant_[static_cast<size_t>(k)];
  uint8_t* all = quantized_.data();
  quant_pack(all + at[static_cast<size_t>(me)], masters, part_.size(), block);
  dp_.all_gather(all, all + at[static_cast<size_t>(me)], part_quant_).wait();
  for (int k = 0; k < p; ++k)
    quant_unpack(params_.data() + flat_partition(total_, k, p).begin, all + at[static_cast<size_t>(k)],
                 part_counts_[static_cast<size_t>(k)], block);
}

Work ZeroState::gather_quantized(GatherSlot& slot, int unit) {
  const auto u = static_cast<size_t>(unit);
  return dp_.all_gather(slot.quantized.data(), quantized_.data() + unit_quant_at_[u], unit_quant_[u]);
}

// The ranks' parts of a unit are consecutive in rank order, as are their packed runs.
void ZeroState::unpack_quantized(GatherSlot& slot, int unit) {
  const auto u = static_cast<size_t>(unit);
  int64_t value = 0, byte = 0;
  for (int k = 0; k < dp_.size(); ++k) {
    const int64_t n = unit_counts_[u][static_cast<size_t>(k)];
    quant_unpack(slot.buffer.data() + value, slot.quantized.data() + byte, n, opt_.quant_block);
    value += n;
    byte += unit_quant_[u][static_cast<size_t>(k)];
  }
}

// g: the bucket's gradients; the part rank j owns (st.counts[j] values, consecutive in rank order)
// is packed into the words sent to j.
Work ZeroState::qgz_issue(Bucket& st, const float* g) {
  const int64_t block = opt_.quant_block;
  const int p = dp_.size();
  const int64_t mine_words = quant_packed_bytes(st.counts[static_cast<size_t>(dp_.rank())], block) / 4;
  st.qsend_counts.clear();
  for (const int64_t n : st.counts) st.qsend_counts.push_back(quant_packed_bytes(n, block) / 4);
  st.qrecv_counts.assign(static_cast<size_t>(p), mine_words);
  st.qsend.resize(static_cast<size_t>(sum_of(st.qsend_counts)));
  st.qrecv.resize(static_cast<size_t>(mine_words * p));
  int64_t value = 0, word = 0;
  for (int j = 0; j < p; ++j) {
    const int64_t n = st.counts[static_cast<size_t>(j)];
    quant_pack(reinterpret_cast<uint8_t*>(st.qsend.data() + word), g + value, n, block);
    value += n;
    word += st.qsend_counts[static_cast<size_t>(j)];
  }
  reduce16_bytes_ += 4 * static_cast<int64_t>(st.qsend.size() + st.qrecv.size());
  reduce16_peak_ = std::max(reduce16_peak_, reduce16_bytes_);
  return dp_.all_to_all(st.qrecv.data(), st.qrecv_counts, st.qsend.data(), st.qsend_counts);
}

// out: this rank's part of the bucket (st.mine), the float32 sum in rank order of the dequantized
// contributions, starting from zero.
void ZeroState::qgz_complete(Bucket& st, float* out) {
  const int64_t n = st.mine.size(), words = st.qrecv_counts.empty() ? 0 : st.qrecv_counts[0];
  std::fill(out, out + n, 0.0f);
  for (int k = 0; k < dp_.size(); ++k)
    quant_unpack_add(out, reinterpret_cast<const uint8_t*>(st.qrecv.data() + words * k), n, opt_.quant_block);
  reduce16_bytes_ -= 4 * static_cast<int64_t>(st.qsend.size() + st.qrecv.size());
  std::vector<float>().swap(st.qsend);
  std::vector<float>().swap(st.qrecv);
}

void ZeroState::keep_secondary(GatherSlot& slot, int unit) {
  const auto u = static_cast<size_t>(unit);
  const FlatRange slice = flat_partition(units_[u].size(), hpz_.rank(), opt_.hpz_partition_size);
  std::copy(slot.buffer.data() + slice.begin, slot.buffer.data() + slice.end, secondary_.data() + secondary_at_[u]);
  secondary_valid_[u] = true;
  slot.keep_secondary = false;
}

}  // namespace megatrain
