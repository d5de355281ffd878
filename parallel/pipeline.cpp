#include "parallel/pipeline.h"

#include <algorithm>
#include <cstring>

namespace megatrain {
namespace {

int tag_of(PipeOp op, int micro) { return 2 * micro + (op == PipeOp::backward ? 1 : 0); }
int dir_of(PipeOp op) { return op == PipeOp::forward ? 0 : 1; }

}  // namespace

int peak_held(const std::vector<PipeStep>& steps) {
  const PipeOp frees = splits_backward(steps) ? PipeOp::weight : PipeOp::backward;
  int held = 0, peak = 0;
  for (const PipeStep& s : steps) peak = std::max(peak, held += s.op == PipeOp::forward ? 1 : s.op == frees ? -1 : 0);
  return peak;
}

PipelineExecutor::PipelineExecutor(const Comm& pp, int64_t floats, int slots)
    : pp_(pp), floats_(floats), busy_(static_cast<size_t>(slots), false), act_sends_(static_cast<size_t>(slots)) {
  MT_CHECK(slots >= 1 && floats > 0, "pipeline executor: {} slots of {} floats", slots, floats);
  for (auto& dir : in_)
    for (auto& buf : dir) buf.resize(static_cast<size_t>(floats));
  for (auto& buf : out_) buf.resize(static_cast<size_t>(floats));
}

void PipelineExecutor::run(const std::vector<PipeStep>& steps, PipelineWork& work) {
  // The steps whose input arrives over the network, per direction, in list order.
  std::vector<PipeStep> need[2];
  for (const PipeStep& s : steps)
    if ((s.op == PipeOp::forward && !first()) || (s.op == PipeOp::backward && !last()))
      need[dir_of(s.op)].push_back(s);
  size_t head[2] = {0, 0}, posted[2] = {0, 0};
  // Keep the receives of the next two inputs of each direction posted (two buffers each).
  const auto post_ahead = [&] {
    for (int d = 0; d < 2; ++d)
      for (; posted[d] < std::min(head[d] + 2, need[d].size()); ++posted[d]) {
        const PipeStep& s = need[d][posted[d]];
        const int peer = pp_.rank() + (d == 0 ? -1 : 1);
        posted_[d][posted[d] % 2] = {s.micro, pp_.recv(in_[d][posted[d] % 2].data(), floats_, peer, tag_of(s.op, s.micro))};
      }
  };
  const auto take = [&](const PipeStep& s) {
    const int d = dir_of(s.op);
    Posted& p = posted_[d][head[d] % 2];
    MT_CHECK(p.micro == s.micro, "pipeline: expected the input of micro-batch {}, posted {}", s.micro, p.micro);
    p.work.wait();
    return Tensor(in_[d][head[d] % 2].data(), Shape{floats_});
  };
  int micro_batches = 0;
  for (const PipeStep& s : steps) micro_batches = std::max(micro_batches, s.micro + 1);
  slot_of_.assign(static_cast<size_t>(micro_batches), -1);
  const bool split = splits_backward(steps);
  const auto release = [&](int micro) {
    busy_[static_cast<size_t>(slot_of_[static_cast<size_t>(micro)])] = false;
    slot_of_[static_cast<size_t>(micro)] = -1;
  };
  for (const PipeStep& s : steps) {
    if (s.op == PipeOp::weight) {
      const int slot = slot_of_[static_cast<size_t>(s.micro)];
      MT_CHECK(slot >= 0, "pipeline: weight step of micro-batch {} before its forward", s.micro);
      work.weight(slot);
      release(s.micro);
      continue;
    }
    post_ahead();
    const int d = dir_of(s.op);
    const bool remote = s.op == PipeOp::forward ? !first() : !last();
    const Tensor in = remote ? take(s) : Tensor{};
    if (s.op == PipeOp::forward) {
      const auto free = std::find(busy_.begin(), busy_.end(), false);
      MT_CHECK(free != busy_.end(), "pipeline: no free slot for micro-batch {} ({} slots)", s.micro, busy_.size());
      const auto slot = static_cast<size_t>(free - busy_.begin());
      act_sends_[slot].wait();  // the slot's previous output has left
      busy_[slot] = true;
      slot_of_[static_cast<size_t>(s.micro)] = static_cast<int>(slot);
      const Tensor out = work.forward(static_cast<int>(slot), s.micro, in);
      if (!last()) act_sends_[slot] = pp_.send(out.f32(), floats_, pp_.rank() + 1, tag_of(PipeOp::forward, s.micro));
    } else {
      const int slot = slot_of_[static_cast<size_t>(s.micro)];
      MT_CHECK(slot >= 0, "pipeline: backward of micro-batch {} before its forward", s.micro);
      const Tensor din = work.backward(slot, in);
      if (!split) release(s.micro);
      if (!first()) {
        out_work_[out_next_].wait();
        std::memcpy(out_[out_next_].data(), din.f32(), sizeof(float) * static_cast<size_t>(floats_));
        out_work_[out_next_] = pp_.send(out_[out_next_].data(), floats_, pp_.rank() - 1, tag_of(PipeOp::backward, s.micro));
        out_next_ ^= 1;
      }
    }
    if (remote) ++head[d];
  }
  for (Work& w : act_sends_) w.wait();
  for (Work& w : out_work_) w.wait();
}

void PipelineExecutor::run_forward(int micro_batches, PipelineWork& work) {
  for (int m = 0; m < micro_batches; ++m) {
    Tensor in;
    if (!first()) {
      pp_.recv(in_[0][0].data(), floats_, pp_.rank() - 1, tag_of(PipeOp::forward, m)).wait();
      in = Tensor(in_[0][0].data(), Shape{floats_});
    }
    act_sends_[0].wait();
    const Tensor out = work.forward(0, m, in);
    if (!last()) act_sends_[0] = pp_.send(out.f32(), floats_, pp_.rank() + 1, tag_of(PipeOp::forward, m));
  }
  act_sends_[0].wait();
}

}  // namespace megatrain
