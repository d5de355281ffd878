#include "parallel/expert_dispatch.h"

#include <cstring>

#include "kernels/ops.h"

namespace megatrain {

ExpertDispatch::ExpertDispatch(std::optional<Comm> ep, int n_experts, int64_t width, const Stream& stream)
    : ep_(std::move(ep)), n_experts_(n_experts), width_(width), stream_(stream) {
  if (ep_ && ep_->size() > 1) {
    ep_size_ = ep_->size();
    ep_rank_ = ep_->rank();
  } else {
    ep_.reset();
  }
  MT_CHECK(n_experts_ >= 1 && n_experts_ % ep_size_ == 0, "{} experts do not split over ep = {}", n_experts_, ep_size_);
  send_floats_.resize(static_cast<size_t>(ep_size_));
  recv_floats_.resize(static_cast<size_t>(ep_size_));
}

void ExpertDispatch::plan(DispatchCounts& c, const int64_t* send_counts) const {
  const auto E = static_cast<size_t>(n_experts_);
  c.all.resize(E * static_cast<size_t>(ep_size_));
  std::memcpy(c.all.data() + E * static_cast<size_t>(ep_rank_), send_counts, E * sizeof(int64_t));
  if (ep_) {
    const std::vector<int64_t> each(static_cast<size_t>(ep_size_), static_cast<int64_t>(E));
    const int64_t* mine = c.all.data() + E * static_cast<size_t>(ep_rank_);
    ep_->all_gather(c.all.data(), mine, each).wait();  // in place: this rank's part is already there
  }
  c.sent = 0;
  for (size_t e = 0; e < E; ++e) c.sent += send_counts[e];
  c.received = 0;
  for (int s = 0; s < ep_size_; ++s)
    for (int x = 0; x < local_experts(); ++x) c.received += rows(c, s, x);
}

int64_t ExpertDispatch::expert_rows(const DispatchCounts& c, int x) const {
  int64_t n = 0;
  for (int s = 0; s < ep_size_; ++s) n += rows(c, s, x);
  return n;
}

int64_t ExpertDispatch::expert_offset(const DispatchCounts& c, int x) const {
  int64_t at = 0;
  for (int y = 0; y < x; ++y) at += expert_rows(c, y);
  return at;
}

void ExpertDispatch::peer_floats(const DispatchCounts& c, std::vector<int64_t>& send,
                                 std::vector<int64_t>& recv) const {
  const int El = local_experts();
  for (int d = 0; d < ep_size_; ++d) {
    int64_t out = 0;
    for (int x = 0; x < El; ++x)
      out += c.all[static_cast<size_t>(ep_rank_) * static_cast<size_t>(n_experts_) + static_cast<size_t>(d * El + x)];
    send[static_cast<size_t>(d)] = out * width_;
    int64_t in = 0;
    for (int x = 0; x < El; ++x) in += rows(c, d, x);
    recv[static_cast<size_t>(d)] = in * width_;
  }
}

void ExpertDispatch::move_rows(Tensor to, int64_t dst, Tensor from, int64_t src, int64_t n) const {
  if (n > 0) copy(stream_, to.part(dst * width_, Shape{n * width_}), from.part(src * width_, Shape{n * width_}));
}

void ExpertDispatch::regroup(const DispatchCounts& c, Tensor to, Tensor from, bool to_grouped) const {
  // Block (s, x) sits at source-major offset Σ rows before it in (s, x) order, and at expert-major
  // offset Σ rows before it in (x, s) order.
  const int El = local_experts();
  int64_t by_source = 0;
  for (int s = 0; s < ep_size_; ++s)
    for (int x = 0; x < El; ++x) {
      int64_t grouped = expert_offset(c, x);
      for (int t = 0; t < s; ++t) grouped += rows(c, t, x);
      const int64_t n = rows(c, s, x);
      move_rows(to, to_grouped ? grouped : by_source, from, to_grouped ? by_source : grouped, n);
      by_source += n;
    }
}

Work ExpertDispatch::dispatch_start(const DispatchCounts& c, Tensor by_source, Tensor send) const {
  MT_CHECK(send.numel() >= c.sent * width_ && by_source.numel() >= c.received * width_,
           "dispatch of {} rows out, {} in: buffers of {} and {} floats", c.sent, c.received, send.numel(),
           by_source.numel());
  if (!ep_) {
    move_rows(by_source, 0, send, 0, c.sent);
    return Work{};
  }
  peer_floats(c, send_floats_, recv_floats_);
  return ep_->all_to_all(by_source.f32(), recv_floats_, send.f32(), send_floats_);
}

void ExpertDispatch::dispatch_finish(const DispatchCounts& c, Tensor grouped, Tensor by_source) const {
  regroup(c, grouped, by_source, true);
}

void ExpertDispatch::combine_regroup(const DispatchCounts& c, Tensor by_source, Tensor grouped) const {
  regroup(c, by_source, grouped, false);
}

Work ExpertDispatch::combine_start(const DispatchCounts& c, Tensor send, Tensor by_source) const {
  MT_CHECK(send.numel() >= c.sent * width_ && by_source.numel() >= c.received * width_,
           "combine of {} rows in, {} out: buffers of {} and {} floats", c.sent, c.received, send.numel(),
           by_source.numel());
  if (!ep_) {
    move_rows(send, 0, by_source, 0, c.sent);
    return Work{};
  }
  peer_floats(c, send_floats_, recv_floats_);
  return ep_->all_to_all(send.f32(), send_floats_, by_source.f32(), recv_floats_);  // the reverse exchange
}

}  // namespace megatrain
