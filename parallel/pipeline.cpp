#include "parallel/pipeline.h"

#include <algorithm>

#include "kernels/ops.h"

namespace megatrain {
namespace {

int dir_of(PipeOp op) { return op == PipeOp::forward ? 0 : 1; }

}  // namespace

int peak_held(const std::vector<PipeStep>& steps, int chunk) {
  const PipeOp frees = splits_backward(steps) ? PipeOp::weight : PipeOp::backward;
  int held = 0, peak = 0;
  for (const PipeStep& s : steps)
    if (s.chunk == chunk) peak = std::max(peak, held += s.op == PipeOp::forward ? 1 : s.op == frees ? -1 : 0);
  return peak;
}

PipelineExecutor::PipelineExecutor(const Comm& pp, int64_t floats, std::vector<int> slots, const Stream& stream)
    : pp_(pp), floats_(floats), slots_(std::move(slots)), stream_(stream) {
  MT_CHECK(!slots_.empty() && floats > 0, "pipeline executor: {} chunks of {} floats", slots_.size(), floats);
  MT_CHECK(pp.size() > 1 || slots_.size() == 1, "pipeline executor: {} model chunks on a pipeline of one stage",
           slots_.size());
  if (pp.size() > 1) links_.emplace(pp, chunks() > 1);
  for (int n : slots_) {
    MT_CHECK(n >= 1, "pipeline executor: a chunk with {} slots", n);
    busy_.emplace_back(static_cast<size_t>(n), false);
    act_sends_.emplace_back(static_cast<size_t>(n));
  }
  slot_of_.resize(slots_.size());
  for (auto& dir : in_)
    for (auto& buf : dir) buf = FlatBuffer(floats, stream);
  for (auto& buf : out_) buf = FlatBuffer(floats, stream);
}

int PipelineExecutor::tag_of(PipeOp op, int micro, int chunk) const {
  return 2 * (micro * chunks() + chunk) + (op == PipeOp::backward ? 1 : 0);
}

void PipelineExecutor::forward(int chunk, int slot, int micro, Tensor in, PipelineWork& work) {
  Work& sent = act_sends_[static_cast<size_t>(chunk)][static_cast<size_t>(slot)];
  sent.wait();  // the slot's previous output has left
  const Tensor out = work.forward(chunk, slot, micro, in);
  if (last(chunk)) return;
  // The receiver: chunk c of rank s + 1, or chunk c + 1 of rank 0 after the last rank.
  sent = links_->send(PipeDir::forward, out.f32(), floats_);
}

void PipelineExecutor::run(const std::vector<PipeStep>& steps, PipelineWork& work) {
  // The steps whose input arrives over the network, per direction, in list order.
  std::vector<PipeStep> need[2];
  for (const PipeStep& s : steps)
    if ((s.op == PipeOp::forward && !first(s.chunk)) || (s.op == PipeOp::backward && !last(s.chunk)))
      need[dir_of(s.op)].push_back(s);
  size_t head[2] = {0, 0}, posted[2] = {0, 0};
  // Keep the receives of the next two inputs of each direction posted (two buffers each).
  const auto post_ahead = [&] {
    for (int d = 0; d < 2; ++d)
      for (; posted[d] < std::min(head[d] + 2, need[d].size()); ++posted[d]) {
        const PipeStep& s = need[d][posted[d]];
        posted_[d][posted[d] % 2] = {tag_of(s.op, s.micro, s.chunk),
                                     links_->recv(static_cast<PipeDir>(d), in_[d][posted[d] % 2].data(), floats_)};
      }
  };
  const auto take = [&](const PipeStep& s) {
    const int d = dir_of(s.op);
    Posted& posted_buf = posted_[d][head[d] % 2];
    MT_CHECK(posted_buf.tag == tag_of(s.op, s.micro, s.chunk), "pipeline: the input of micro-batch {} (chunk {}) was "
             "not the one posted", s.micro, s.chunk);
    posted_buf.work.wait();
    return in_[d][head[d] % 2].part(0, floats_);
  };
  int micro_batches = 0;
  for (const PipeStep& s : steps) micro_batches = std::max(micro_batches, s.micro + 1);
  for (auto& of : slot_of_) of.assign(static_cast<size_t>(micro_batches), -1);
  const bool split = splits_backward(steps);
  const auto slot_of = [&](const PipeStep& s) -> int& {
    return slot_of_[static_cast<size_t>(s.chunk)][static_cast<size_t>(s.micro)];
  };
  const auto release = [&](const PipeStep& s) {
    busy_[static_cast<size_t>(s.chunk)][static_cast<size_t>(slot_of(s))] = false;
    slot_of(s) = -1;
  };
  for (const PipeStep& s : steps) {
    if (s.op != PipeOp::forward) MT_CHECK(slot_of(s) >= 0, "pipeline: micro-batch {} (chunk {}) before its forward",
                                          s.micro, s.chunk);
    if (s.op == PipeOp::weight) {
      work.weight(s.chunk, slot_of(s));
      release(s);
      continue;
    }
    post_ahead();
    const int d = dir_of(s.op);
    const bool remote = s.op == PipeOp::forward ? !first(s.chunk) : !last(s.chunk);
    const Tensor in = remote ? take(s) : Tensor{};
    if (s.op == PipeOp::forward) {
      std::vector<bool>& busy = busy_[static_cast<size_t>(s.chunk)];
      const auto free = std::find(busy.begin(), busy.end(), false);
      MT_CHECK(free != busy.end(), "pipeline: no free slot for micro-batch {} (chunk {}, {} slots)", s.micro, s.chunk,
               busy.size());
      const auto slot = static_cast<int>(free - busy.begin());
      busy[static_cast<size_t>(slot)] = true;
      slot_of(s) = slot;
      forward(s.chunk, slot, s.micro, in, work);
    } else {
      const Tensor din = work.backward(s.chunk, slot_of(s), in);
      if (!split) release(s);
      if (!first(s.chunk)) {
        // The receiver: chunk c of rank s − 1, or chunk c − 1 of the last rank before rank 0.
        out_work_[out_next_].wait();
        copy(stream_, out_[out_next_].part(0, floats_), din);
        out_work_[out_next_] = links_->send(PipeDir::backward, out_[out_next_].data(), floats_);
        out_next_ ^= 1;
      }
    }
    if (remote) ++head[d];
  }
  for (auto& chunk : act_sends_)
    for (Work& w : chunk) w.wait();
  for (Work& w : out_work_) w.wait();
}

void PipelineExecutor::run_forward(int micro_batches, PipelineWork& work) {
  for (int m = 0; m < micro_batches; ++m)
    for (int c = 0; c < chunks(); ++c) {
      Tensor in;
      if (!first(c)) {
        links_->recv(PipeDir::forward, in_[0][0].data(), floats_).wait();
        in = in_[0][0].part(0, floats_);
      }
      forward(c, 0, m, in, work);
    }
  for (auto& chunk : act_sends_)
    for (Work& w : chunk) w.wait();
}

}  // namespace megatrain
