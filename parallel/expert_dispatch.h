// Token exchange of expert parallelism (Megatron-Core's all-to-all token dispatcher): the expert
// dispatch and its conjugate, the combine, each the other's backward.
//
// E experts over the ep ranks of `ep`, rank r holding the El = E / ep experts [r·El, (r+1)·El).
// A rank *sends* rows in destination-major, expert-minor order (every row for global expert e
// before those for e + 1: the order a permutation by expert gives) and *holds* the rows its own
// experts receive grouped by local expert, each expert's rows ordered by source rank:
//
//   dispatch  send (S, C)  →  all-to-all(v)  →  by source  →  regroup  →  grouped (R, C)
//   combine   grouped (R, C)  →  regroup  →  by source  →  all-to-all(v)  →  send order (S, C)
//
// Forward dispatches tokens and combines expert outputs; backward dispatches output gradients
// and combines input gradients. plan() exchanges the row counts first (every rank learns every
// rank's counts, so both directions are known without another exchange). Communication and the
// local regrouping are separate calls (start → Work, then finish) so compute can run in between. A
// rank that sends or receives no rows takes part with empty buffers. ep = 1: no communication.
// The buffers live on the stream's device: rows are moved by the copy op on it, and exchanged by
// the communicator (NCCL for a GPU's memory).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/device.h"
#include "kernels/tensor.h"
#include "parallel/comm.h"

namespace megatrain {

// The row counts of one exchange (one micro-batch of one MoE layer), kept for its backward.
struct DispatchCounts {
  std::vector<int64_t> all;  // ep × E: rows rank s sends to global expert e, at [s·E + e]
  int64_t sent = 0, received = 0;
};

class ExpertDispatch {
 public:
  // `ep`: the expert-parallel group (nullopt or size 1: none); width C floats per row; the buffers'
  // stream.
  ExpertDispatch(std::optional<Comm> ep, int n_experts, int64_t width, const Stream& stream = Stream::cpu());

  int ep_size() const { return ep_size_; }
  int ep_rank() const { return ep_rank_; }
  int local_experts() const { return n_experts_ / ep_size_; }
  // Collective: every rank's send_counts (E: rows it sends to each global expert) into `counts`.
  void plan(DispatchCounts& counts, const int64_t* send_counts) const;
  // Rows local expert x receives (all sources), and where they start in the grouped buffer.
  int64_t expert_rows(const DispatchCounts& counts, int x) const;
  int64_t expert_offset(const DispatchCounts& counts, int x) const;

  // dispatch: send (≥ S rows) → by_source (≥ R rows); then by_source → grouped (≥ R rows).
  Work dispatch_start(const DispatchCounts& counts, Tensor by_source, Tensor send) const;
  void dispatch_finish(const DispatchCounts& counts, Tensor grouped, Tensor by_source) const;
  // combine: grouped → by_source; then by_source → send order (≥ S rows), on the Work's completion.
  void combine_regroup(const DispatchCounts& counts, Tensor by_source, Tensor grouped) const;
  Work combine_start(const DispatchCounts& counts, Tensor send, Tensor by_source) const;

 private:
  // Rows from source s to local expert x.
  int64_t rows(const DispatchCounts& c, int s, int x) const {
    return c.all[static_cast<size_t>(s) * static_cast<size_t>(n_experts_) +
                 static_cast<size_t>(ep_rank_ * local_experts() + x)];
  }
  // Floats per peer of the send side and of the receive side.
  void peer_floats(const DispatchCounts& c, std::vector<int64_t>& send, std::vector<int64_t>& recv) const;
  // n rows from row src of `from` to row dst of `to`.
  void move_rows(Tensor to, int64_t dst, Tensor from, int64_t src, int64_t n) const;
  // Moves row blocks between source-major and expert-major order.
  void regroup(const DispatchCounts& c, Tensor to, Tensor from, bool to_grouped) const;

  std::optional<Comm> ep_;
  int ep_size_ = 1, ep_rank_ = 0, n_experts_ = 0;
  int64_t width_ = 0;
  Stream stream_;
  mutable std::vector<int64_t> send_floats_, recv_floats_;  // per call, reused (no allocation per step)
};

}  // namespace megatrain
