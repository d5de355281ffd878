// ZeRO++ qgZ ([Note: ZeRO++] in optim/zero_plan.h): a bucket's reduce-scatter as an all-to-all of
// int8 blocks. Each rank quantizes the part of the bucket each rank owns (its own part too, so every
// contribution is treated alike) and sends it to the owner, which dequantizes the p parts it
// receives and sums them in float32 in rank order. The packed runs travel as 4-byte words
// ([Note: packed int8 layout] in optim/compress/block_quant.h).
#include <algorithm>
#include <numeric>

#include "optim/compress/block_quant.h"
#include "optim/reducer.h"

namespace megatrain {
namespace {

class QgzWire final : public Reducer {
 public:
  QgzWire(const ZeroPlan& plan, const Comm& dp, std::unique_ptr<Collective> c)
      : dp_(dp),
        block_(plan.options.quant_block),
        counts_(plan.bucket_counts),
        c_(std::move(c)),
        words_(static_cast<size_t>(plan.buckets.size())) {}
  Work issue(int b, Tensor grads, float* out) override;
  void complete(int b, float* out) override;
  const Collective& collective() const override { return *c_; }
  int64_t exchange_peak() const override { return peak_; }

 private:
  struct Words {
    std::vector<float> send, recv;                  // packed runs as words, to and from each rank
    std::vector<int64_t> send_counts, recv_counts;  // their sizes in words
  };
  Comm dp_;
  int64_t block_;
  std::vector<std::vector<int64_t>> counts_;  // per bucket: each rank's part
  std::unique_ptr<Collective> c_;
  std::vector<Words> words_;  // per bucket, while its exchange is in flight
  int64_t bytes_ = 0, peak_ = 0;
};

// The part rank j owns (counts[j] values, consecutive in rank order) is packed into the words sent to j.
Work QgzWire::issue(int b, Tensor grads, float* out) {
  (void)out;
  const std::vector<int64_t>& counts = counts_[static_cast<size_t>(b)];
  Words& w = words_[static_cast<size_t>(b)];
  const int p = dp_.size();
  const int64_t mine = quant_packed_bytes(counts[static_cast<size_t>(dp_.rank())], block_) / 4;
  w.send_counts.clear();
  for (const int64_t n : counts) w.send_counts.push_back(quant_packed_bytes(n, block_) / 4);
  w.recv_counts.assign(static_cast<size_t>(p), mine);
  w.send.resize(static_cast<size_t>(std::accumulate(w.send_counts.begin(), w.send_counts.end(), int64_t{0})));
  w.recv.resize(static_cast<size_t>(mine * p));
  const float* g = grads.f32();
  int64_t value = 0, word = 0;
  for (size_t j = 0; j < counts.size(); ++j) {
    quant_pack(reinterpret_cast<uint8_t*>(w.send.data() + word), g + value, counts[j], block_);
    value += counts[j];
    word += w.send_counts[j];
  }
  bytes_ += 4 * static_cast<int64_t>(w.send.size() + w.recv.size());
  peak_ = std::max(peak_, bytes_);
  return dp_.all_to_all(w.recv.data(), w.recv_counts, w.send.data(), w.send_counts);
}

// out: this rank's part of the bucket, the float32 sum in rank order of the dequantized
// contributions, starting from zero.
void QgzWire::complete(int b, float* out) {
  Words& w = words_[static_cast<size_t>(b)];
  const int64_t n = counts_[static_cast<size_t>(b)][static_cast<size_t>(dp_.rank())];
  const int64_t words = w.recv_counts.empty() ? 0 : w.recv_counts[0];
  std::fill(out, out + n, 0.0f);
  for (int k = 0; k < dp_.size(); ++k)
    quant_unpack_add(out, reinterpret_cast<const uint8_t*>(w.recv.data() + words * k), n, block_);
  bytes_ -= 4 * static_cast<int64_t>(w.send.size() + w.recv.size());
  std::vector<float>().swap(w.send);
  std::vector<float>().swap(w.recv);
}

}  // namespace

std::unique_ptr<Reducer> make_qgz_wire(const ZeroPlan& plan, const Comm& dp, std::unique_ptr<Collective> c) {
  return std::make_unique<QgzWire>(plan, dp, std::move(c));
}

}  // namespace megatrain
