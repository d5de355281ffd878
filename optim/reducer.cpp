// The collectives and the float32, bf16 and compressed wire formats of optim/reducer.h.
#include "optim/reducer.h"

#include <algorithm>

#include "kernels/flat_buffer.h"
#include "optim/half_convert.h"

namespace megatrain {
namespace {

// Stage 0: every rank receives the whole bucket's sum, in place.
class AllReduce final : public Collective {
 public:
  AllReduce(const ZeroPlan& plan, const Comm& dp) : dp_(dp), buckets_(plan.buckets) {}
  int64_t result_size(int b) const override { return buckets_[b].range.size(); }
  bool in_place() const override { return true; }
  Work reduce(float* out, float* in, int b) const override { return run(out, in, b); }
  Work reduce(Bf16* out, Bf16* in, int b) const override { return run(out, in, b); }
  const Comm* partitions() const override { return nullptr; }

 private:
  template <class T>
  Work run(T* out, T* in, int b) const {
    MT_CHECK(out == in, "ZeRO: an all-reduce reduces in place");
    return dp_.all_reduce(in, result_size(b));
  }
  Comm dp_;
  GradBuckets buckets_;
};

// Stages 1–3: every rank receives the sum of its partition's part of the bucket.
class ReduceScatter final : public Collective {
 public:
  ReduceScatter(const ZeroPlan& plan, const Comm& dp) : dp_(dp), counts_(plan.bucket_counts), mine_(plan.bucket_mine) {}
  int64_t result_size(int b) const override { return mine_[static_cast<size_t>(b)].size(); }
  bool in_place() const override { return false; }
  Work reduce(float* out, float* in, int b) const override {
    return dp_.reduce_scatter(out, in, counts_[static_cast<size_t>(b)]);
  }
  Work reduce(Bf16* out, Bf16* in, int b) const override {
    return dp_.reduce_scatter(out, in, counts_[static_cast<size_t>(b)]);
  }
  const Comm* partitions() const override { return &dp_; }

 private:
  Comm dp_;
  std::vector<std::vector<int64_t>> counts_;
  std::vector<FlatRange> mine_;
};

class FloatWire final : public Reducer {
 public:
  explicit FloatWire(std::unique_ptr<Collective> c) : c_(std::move(c)) {}
  Work issue(int b, Tensor grads, float* out) override { return c_->reduce(out, grads.f32(), b); }
  const Collective& collective() const override { return *c_; }

 private:
  std::unique_ptr<Collective> c_;
};

// [Note: bf16 reduction]: the rounded bucket (and, reduce-scattered, the reduced part) live from the
// issue to the completion.
class Bf16Wire final : public Reducer {
 public:
  Bf16Wire(const ZeroPlan& plan, std::unique_ptr<Collective> c)
      : stream_(plan.options.stream), c_(std::move(c)), copies_(static_cast<size_t>(plan.buckets.size())) {}
  Work issue(int b, Tensor grads, float* out) override {
    (void)out;
    Copies& k = copies_[static_cast<size_t>(b)];
    const int64_t n = grads.numel();
    k.send = HalfBuffer(n, Precision::bf16, stream_);
    to_half(stream_, k.send.part(0, n), grads.f32());
    if (!c_->in_place()) k.recv = HalfBuffer(c_->result_size(b), Precision::bf16, stream_);
    bytes_ += 2 * (k.send.size() + k.recv.size());
    peak_ = std::max(peak_, bytes_);
    Bf16* send = reinterpret_cast<Bf16*>(k.send.data());
    return c_->reduce(c_->in_place() ? send : reinterpret_cast<Bf16*>(k.recv.data()), send, b);
  }
  void complete(int b, float* out) override {
    Copies& k = copies_[static_cast<size_t>(b)];
    const int64_t n = c_->result_size(b);
    if (n > 0) from_half(stream_, out, (c_->in_place() ? k.send : k.recv).part(0, n));
    bytes_ -= 2 * (k.send.size() + k.recv.size());
    k = Copies{};
  }
  const Collective& collective() const override { return *c_; }
  int64_t exchange_peak() const override { return peak_; }

 private:
  struct Copies {
    HalfBuffer send, recv;
  };
  Stream stream_;
  std::unique_ptr<Collective> c_;
  std::vector<Copies> copies_;  // per bucket
  int64_t bytes_ = 0, peak_ = 0;
};

// Stage 0's compressed all-reduce: the compressor replaces the bucket's gradients by the estimate of
// their sum (optim/compress/grad_compression.h), blocking.
class CompressedWire final : public Reducer {
 public:
  CompressedWire(const ZeroPlan& plan, const Comm& dp, std::unique_ptr<Collective> c)
      : buckets_(plan.buckets),
        c_(std::move(c)),
        compressor_(make_grad_compressor(plan.options.compression, dp, plan.options.matrices,
                                         plan.options.powersgd_rank, plan.options.seed)) {}
  Work issue(int b, Tensor grads, float* out) override {
    (void)out;
    compressor_->reduce(grads.f32(), buckets_[b].range);
    return Work{};
  }
  const Collective& collective() const override { return *c_; }
  int64_t state_bytes() const override { return compressor_->state_bytes(); }

 private:
  GradBuckets buckets_;
  std::unique_ptr<Collective> c_;
  std::unique_ptr<GradCompressor> compressor_;
};

}  // namespace

std::unique_ptr<Collective> make_all_reduce(const ZeroPlan& plan, const Comm& dp) {
  return std::make_unique<AllReduce>(plan, dp);
}
std::unique_ptr<Collective> make_reduce_scatter(const ZeroPlan& plan, const Comm& dp) {
  return std::make_unique<ReduceScatter>(plan, dp);
}
std::unique_ptr<Reducer> make_float_wire(std::unique_ptr<Collective> c) {
  return std::make_unique<FloatWire>(std::move(c));
}
std::unique_ptr<Reducer> make_bf16_wire(const ZeroPlan& plan, std::unique_ptr<Collective> c) {
  return std::make_unique<Bf16Wire>(plan, std::move(c));
}
std::unique_ptr<Reducer> make_compressed_wire(const ZeroPlan& plan, const Comm& dp, std::unique_ptr<Collective> c) {
  return std::make_unique<CompressedWire>(plan, dp, std::move(c));
}

}  // namespace megatrain
