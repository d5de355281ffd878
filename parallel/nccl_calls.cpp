// Variable-count operations as NCCL calls (see nccl_calls.h).
#include "parallel/nccl_calls.h"

namespace megatrain {
namespace {

// ncclGroupStart; calls(); ncclGroupEnd — the first error of the two.
template <class Calls>
ncclResult_t grouped(Calls&& calls) {
  ncclResult_t rc = ncclGroupStart();
  if (rc != ncclSuccess) return rc;
  const ncclResult_t inner = calls();
  rc = ncclGroupEnd();
  return inner != ncclSuccess ? inner : rc;
}

bool all_equal(std::span<const int64_t> counts) {
  for (int64_t c : counts)
    if (c != counts.front()) return false;
  return true;
}

size_t count_of(int64_t n) { return static_cast<size_t>(n); }

}  // namespace

ncclResult_t nccl_reduce_scatter(void* out, const void* in, std::span<const int64_t> counts, int64_t elem_bytes,
                                 ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (all_equal(counts)) return ncclReduceScatter(in, out, count_of(counts[0]), type, op, comm, stream);
  return grouped([&] {
    int64_t displ = 0;
    for (int j = 0; j < static_cast<int>(counts.size()); ++j) {
      const void* part = static_cast<const char*>(in) + displ * elem_bytes;
      if (counts[j] > 0)  // out is read on the root only
        if (ncclResult_t rc = ncclReduce(part, out, count_of(counts[j]), type, op, j, comm, stream); rc != ncclSuccess)
          return rc;
      displ += counts[j];
    }
    return ncclSuccess;
  });
}

ncclResult_t nccl_all_gather(void* out, const void* in, std::span<const int64_t> counts, int64_t elem_bytes,
                             ncclDataType_t type, int rank, ncclComm_t comm, cudaStream_t stream) {
  // In place when in == out + rank·count, as Comm's contract and ncclAllGather's agree.
  if (all_equal(counts)) return ncclAllGather(in, out, count_of(counts[0]), type, comm, stream);
  return grouped([&] {
    int64_t displ = 0;
    for (int j = 0; j < static_cast<int>(counts.size()); ++j) {
      char* part = static_cast<char*>(out) + displ * elem_bytes;
      if (counts[j] > 0)  // the root sends from in (in place when in == part)
        if (ncclResult_t rc = ncclBroadcast(j == rank ? in : part, part, count_of(counts[j]), type, j, comm, stream);
            rc != ncclSuccess)
          return rc;
      displ += counts[j];
    }
    return ncclSuccess;
  });
}

ncclResult_t nccl_all_to_all(float* out, std::span<const int64_t> recv_counts, const float* in,
                             std::span<const int64_t> send_counts, ncclComm_t comm, cudaStream_t stream) {
  // A zero count on one side is zero on the other (Comm's contract), so both skip it.
  return grouped([&] {
    int64_t sent = 0, received = 0;
    for (int j = 0; j < static_cast<int>(send_counts.size()); ++j) {
      if (send_counts[j] > 0)
        if (ncclResult_t rc = ncclSend(in + sent, count_of(send_counts[j]), ncclFloat32, j, comm, stream);
            rc != ncclSuccess)
          return rc;
      if (recv_counts[j] > 0)
        if (ncclResult_t rc = ncclRecv(out + received, count_of(recv_counts[j]), ncclFloat32, j, comm, stream);
            rc != ncclSuccess)
          return rc;
      sent += send_counts[j];
      received += recv_counts[j];
    }
    return ncclSuccess;
  });
}

ncclResult_t nccl_send_recv(const void* send, void* recv, size_t n, ncclDataType_t type, int to, int from,
                            ncclComm_t comm, cudaStream_t stream) {
  return grouped([&] {
    if (ncclResult_t rc = ncclSend(send, n, type, to, comm, stream); rc != ncclSuccess) return rc;
    return ncclRecv(recv, n, type, from, comm, stream);
  });
}

}  // namespace megatrain
