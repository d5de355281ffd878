#include "optim/grad_store.h"

#include "kernels/ops.h"
#include "optim/grad_pool.h"

namespace megatrain {
namespace {

// Where this rank's part of each bucket lands in its partition (the received shard).
std::vector<int64_t> part_offsets(const ZeroPlan& plan) {
  std::vector<int64_t> at;
  for (const FlatRange& mine : plan.bucket_mine) at.push_back(mine.size() > 0 ? mine.begin - plan.partition.begin : 0);
  return at;
}

class FullGrads final : public GradStore {
 public:
  explicit FullGrads(const ZeroPlan& plan)
      : units_(plan.units), buckets_(plan.buckets), grads_(plan.grads.count, plan.options.stream) {}
  FlatBuffer& accumulator() override { return grads_; }
  bool reduces(bool last) const override { return last; }
  float* unit_grads(int unit) override { return grads_.data() + units_[static_cast<size_t>(unit)].begin; }
  Tensor bucket_grads(int b) override { return grads_.part(buckets_[b].range.begin, buckets_[b].range.size()); }
  float* reduced(int b) override { return grads_.data() + buckets_[b].range.begin; }
  const float* optimizer_grads() const override { return grads_.data(); }

 private:
  std::vector<FlatRange> units_;
  GradBuckets buckets_;
  FlatBuffer grads_;
};

class ScatteredGrads final : public GradStore {
 public:
  explicit ScatteredGrads(const ZeroPlan& plan)
      : units_(plan.units),
        buckets_(plan.buckets),
        at_(part_offsets(plan)),
        grads_(plan.grads.count, plan.options.stream),
        received_(plan.received.count, plan.options.stream) {}
  FlatBuffer& accumulator() override { return grads_; }
  bool reduces(bool last) const override { return last; }
  float* unit_grads(int unit) override { return grads_.data() + units_[static_cast<size_t>(unit)].begin; }
  Tensor bucket_grads(int b) override { return grads_.part(buckets_[b].range.begin, buckets_[b].range.size()); }
  float* reduced(int b) override { return received_.data() + at_[static_cast<size_t>(b)]; }
  const float* optimizer_grads() const override { return received_.data(); }

 private:
  std::vector<FlatRange> units_;
  GradBuckets buckets_;
  std::vector<int64_t> at_;
  FlatBuffer grads_, received_;
};

class PooledGrads final : public GradStore {
 public:
  PooledGrads(const ZeroPlan& plan, std::function<void(int)> complete)
      : stream_(plan.options.stream),
        units_(plan.units),
        buckets_(plan.buckets),
        mine_(plan.bucket_mine),
        at_(part_offsets(plan)),
        complete_(std::move(complete)),
        pool_(plan.buckets.size()),
        grads_(plan.grads.count, stream_),
        received_(plan.received.count, stream_) {}
  FlatBuffer& accumulator() override { return grads_; }
  bool reduces(bool) const override { return true; }
  float* unit_grads(int unit) override {
    const int b = buckets_.bucket_of(unit);
    return bucket_grads(b).f32() + (units_[static_cast<size_t>(unit)].begin - buckets_[b].range.begin);
  }
  Tensor bucket_grads(int b) override;
  float* reduced(int b) override { return received_.data() + at_[static_cast<size_t>(b)]; }
  void issued(int b) override { pool_.issued(b); }
  void completed(int b) override;
  const float* optimizer_grads() const override { return grads_.data(); }
  int64_t pool_floats() const override { return pool_.floats(); }

 private:
  Stream stream_;
  std::vector<FlatRange> units_;
  GradBuckets buckets_;
  std::vector<FlatRange> mine_;
  std::vector<int64_t> at_;
  std::function<void(int)> complete_;
  GradPool pool_;
  std::vector<FlatBuffer> buffers_;  // pool_'s, each sized for the bucket it was made for
  FlatBuffer grads_, received_;
};

// A zeroed buffer for the bucket, by the pool's rule; a new one is zeroed when made.
Tensor PooledGrads::bucket_grads(int b) {
  const int64_t n = buckets_[b].range.size();
  if (pool_.buffer_of(b) < 0) {
    const GradPool::Taken t = pool_.take(b, n, complete_);
    if (t.made)
      buffers_.emplace_back(n, stream_);
    else
      zero_fill(stream_, buffers_[static_cast<size_t>(t.buffer)].part(0, n));
  }
  return buffers_[static_cast<size_t>(pool_.buffer_of(b))].part(0, n);
}

// [Note: grad accumulation] over micro-batches happens here: the reduced part into the shard.
void PooledGrads::completed(int b) {
  const FlatRange mine = mine_[static_cast<size_t>(b)];
  if (pool_.buffer_of(b) >= 0 && mine.size() > 0) {
    const int64_t at = at_[static_cast<size_t>(b)];
    const Tensor acc = grads_.part(at, mine.size());
    add_forward(stream_, acc, acc, received_.part(at, mine.size()));
  }
  pool_.release(b);
}

}  // namespace

std::unique_ptr<GradStore> make_full_grads(const ZeroPlan& plan) { return std::make_unique<FullGrads>(plan); }
std::unique_ptr<GradStore> make_scattered_grads(const ZeroPlan& plan) { return std::make_unique<ScatteredGrads>(plan); }
std::unique_ptr<GradStore> make_pooled_grads(const ZeroPlan& plan, std::function<void(int)> complete) {
  return std::make_unique<PooledGrads>(plan, std::move(complete));
}

}  // namespace megatrain
