// [Note: gradient pool] At ZeRO stages 2–3 a micro-batch's gradients are produced into bucket-sized
// working buffers. A bucket takes one when backward first writes it: a free one large enough (the
// first freed first); else a new one while there are fewer than kBuffers (so up to that many
// reductions overlap backward); else the buffer of the oldest bucket whose reduction is in flight,
// once that completes; else (every buffer held by a bucket backward is still producing, such as
// the tied embedding's, held from the head to the end of backward) a new one. A bucket's buffer
// goes back to the free list when its reduction completes.
// GradPool is that policy over buffer sizes alone: the pooled gradient store (optim/grad_store.h)
// follows it with real buffers, and ZeroPlan (optim/zero_plan.h) replays a step through it to size
// them, so the two cannot disagree. Invariant: a buffer is held by at most one bucket, and a bucket
// holds at most one buffer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace megatrain {

class GradPool {
 public:
  static constexpr size_t kBuffers = 4;
  explicit GradPool(int buckets);

  struct Taken {
    int buffer = -1;
    bool made = false;  // a new buffer: the caller makes it (sizes().back() floats)
  };
  // Bucket b's buffer, taken now if it has none, for n floats; complete(o) must complete the
  // reduction of bucket o (the oldest in flight) and call release(o).
  template <class Complete>
  Taken take(int b, int64_t n, Complete&& complete) {
    if (buffer_of(b) >= 0) return {buffer_of(b), false};
    for (;;) {
      const int free = take_free(n);
      if (free >= 0) return give(b, free, false);
      if (sizes_.size() < kBuffers) break;
      const int oldest = oldest_in_flight();
      if (oldest < 0) break;
      complete(oldest);
    }
    sizes_.push_back(n);
    return give(b, static_cast<int>(sizes_.size()) - 1, true);
  }
  int buffer_of(int b) const { return buffer_[static_cast<size_t>(b)]; }
  void issued(int b) { in_flight_[static_cast<size_t>(b)] = true; }
  // Bucket b's reduction completed: its buffer, if it has one, goes back to the free list.
  void release(int b);
  const std::vector<int64_t>& sizes() const { return sizes_; }
  int64_t floats() const;

 private:
  int take_free(int64_t n);  // a free buffer of at least n floats, off the free list; −1: none
  int oldest_in_flight() const;
  Taken give(int b, int buffer, bool made);

  std::vector<int64_t> sizes_;   // per buffer made
  std::vector<int> free_;        // first freed first
  std::vector<int> buffer_;      // per bucket; −1: none
  std::vector<bool> in_flight_;  // per bucket: issued and not completed
};

}  // namespace megatrain
