// PipelineLinks: the pipeline's point-to-point messages on one communicator per link and
// direction. Link i joins stage i and stage i + 1 (mod pp); forward messages go i → i + 1,
// backward messages i + 1 → i, each direction on a communicator of its own, in which the sender
// is rank 0 and the receiver rank 1. A rank therefore only sends on some communicators and only
// receives on the others.
//
// Why (parallel/comm_nccl.h): NCCL has no tags and runs one communicator's operations in issue
// order on its stream, so on one pipeline communicator a receive posted ahead of a send would hold
// the send back until the peer's message arrived, and two stages waiting on each other that way
// deadlock. On a link, every operation of a rank is of one kind towards one peer, so the only
// order NCCL imposes is the one the messages have anyway: a link is first-in first-out, and the
// executor's lists consume each link's messages in the order they are sent (simulate() checks
// every schedule for it, parallel/pipeline_schedule.h). The messages carry tag 0 on either
// backend, so MPI matches them in the same order as NCCL does and the CPU runs check that order.
//
// The links are made by splits of the pipeline group, in rounds that give each rank at most one
// link per round: link i in round i mod 2, and the wrap-around link pp − 1 → 0 (interleaved
// chunks only) in a third round when pp is odd. Ranks without a link in a round split into a
// communicator of their own, which is dropped.
#pragma once
#include <cstdint>
#include <optional>

#include "parallel/comm.h"

namespace megatrain {

enum class PipeDir { forward = 0, backward = 1 };

class PipelineLinks {
 public:
  // Collective over `pp` (size ≥ 2). `wraps`: the last stage sends forward to the first and the
  // first backward to the last (model chunks > 1).
  PipelineLinks(const Comm& pp, bool wraps);

  // A message of n floats to the next stage in `dir` (stage + 1 forward, stage − 1 backward).
  Work send(PipeDir dir, const float* data, int64_t n) const;
  // A message of n floats from the previous stage in `dir`.
  Work recv(PipeDir dir, float* data, int64_t n) const;

 private:
  std::optional<Comm> out_[2], in_[2];  // per direction: the link sent on, the link received on
};

}  // namespace megatrain
