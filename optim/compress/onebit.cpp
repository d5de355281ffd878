// Sign compression with error feedback (optim/compress/grad_compression.h): one bit per value and one
// scale per block of kOneBitBlock values, gathered from every rank and summed in rank order.
#include <cmath>
#include <map>

#include "optim/compress/grad_compression.h"

namespace megatrain {
namespace {

class OneBit final : public GradCompressor {
 public:
  explicit OneBit(const Comm& comm) : comm_(comm) {}

  void reduce(float* g, FlatRange range) override {
    const int64_t n = range.size();
    const int64_t blocks = (n + kOneBitBlock - 1) / kOneBitBlock, nbytes = (n + 7) / 8;
    std::vector<float>& error = errors_[range.begin];
    error.resize(static_cast<size_t>(n), 0.0f);
    // c = g + e; the scale of a block is its mean |c|; bit set = non-negative.
    std::vector<float> scales(static_cast<size_t>(blocks));
    std::vector<uint8_t> bits(static_cast<size_t>(nbytes), 0);
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t lo = b * kOneBitBlock, hi = std::min(n, lo + kOneBitBlock);
      double sum = 0.0;
      for (int64_t i = lo; i < hi; ++i) {
        g[i] += error[static_cast<size_t>(i)];
        sum += std::fabs(g[i]);
      }
      const auto scale = static_cast<float>(sum / static_cast<double>(hi - lo));
      scales[static_cast<size_t>(b)] = scale;
      for (int64_t i = lo; i < hi; ++i) {
        const bool positive = g[i] >= 0.0f;
        if (positive) bits[static_cast<size_t>(i / 8)] |= static_cast<uint8_t>(1u << (i % 8));
        error[static_cast<size_t>(i)] = g[i] - (positive ? scale : -scale);
      }
    }
    const int p = comm_.size();
    std::vector<uint8_t> all_bits(static_cast<size_t>(nbytes * p));
    std::vector<float> all_scales(static_cast<size_t>(blocks * p));
    const std::vector<int64_t> bit_counts(static_cast<size_t>(p), nbytes), scale_counts(static_cast<size_t>(p), blocks);
    Work w1 = comm_.all_gather(all_bits.data(), bits.data(), bit_counts);
    Work w2 = comm_.all_gather(all_scales.data(), scales.data(), scale_counts);
    w1.wait();
    w2.wait();
    // Σ over ranks, in rank order, of scale · sign.
    for (int64_t i = 0; i < n; ++i) {
      float sum = 0.0f;
      for (int q = 0; q < p; ++q) {
        const float scale = all_scales[static_cast<size_t>(q * blocks + i / kOneBitBlock)];
        const bool positive = (all_bits[static_cast<size_t>(q * nbytes + i / 8)] >> (i % 8)) & 1u;
        sum += positive ? scale : -scale;
      }
      g[i] = sum;
    }
  }

  std::vector<float> error(FlatRange r) const override {
    std::vector<float> out(static_cast<size_t>(r.size()), 0.0f);
    for (const auto& [begin, e] : errors_)
      for (size_t i = 0; i < e.size(); ++i) {
        const int64_t at = begin + static_cast<int64_t>(i);
        if (at >= r.begin && at < r.end) out[static_cast<size_t>(at - r.begin)] = e[i];
      }
    return out;
  }

  int64_t state_bytes() const override {
    int64_t floats = 0;
    for (const auto& [begin, e] : errors_) floats += static_cast<int64_t>(e.size());
    return floats * static_cast<int64_t>(sizeof(float));
  }

 private:
  Comm comm_;
  std::map<int64_t, std::vector<float>> errors_;  // by range start
};

}  // namespace

std::unique_ptr<GradCompressor> make_onebit(const Comm& comm) { return std::make_unique<OneBit>(comm); }

}  // namespace megatrain
