// Comm's variable-count operations as NCCL call sequences (built only with MEGATRAIN_CUDA). NCCL's
// reduce-scatter and all-gather take one count for every rank; Comm's take one per rank, so unequal
// parts become one ncclReduce or ncclBroadcast per rank inside an NCCL group, and all_to_all is
// grouped ncclSend/ncclRecv (how NCCL's own documentation builds an all-to-all). Each returns the
// first NCCL error; the caller (parallel/comm_nccl.cpp) turns it into a CommError.
// Invariant: the calls enqueued on `stream` produce exactly the result of Comm's MPI backend for
// the same arguments (comm.h), counts and displacements in elements of `elem_bytes` bytes.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <span>

namespace megatrain {

// out: counts[rank] elements, the sum over ranks of this rank's part of in (sum(counts) elements).
ncclResult_t nccl_reduce_scatter(void* out, const void* in, std::span<const int64_t> counts, int64_t elem_bytes,
                                 ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
// out: every rank's part in rank order; in: counts[rank] elements (may be this rank's part of out).
ncclResult_t nccl_all_gather(void* out, const void* in, std::span<const int64_t> counts, int64_t elem_bytes,
                             ncclDataType_t type, int rank, ncclComm_t comm, cudaStream_t stream);
// send_counts[j] floats of `in` to rank j, recv_counts[j] from rank j into `out`, both concatenated
// in rank order; this rank's own part too (NCCL sends to itself inside a group).
ncclResult_t nccl_all_to_all(float* out, std::span<const int64_t> recv_counts, const float* in,
                             std::span<const int64_t> send_counts, ncclComm_t comm, cudaStream_t stream);
// n elements of `send` to rank `to` and n from rank `from` into `recv`, as one group (so a ring of
// them, every rank sending on and receiving from behind, cannot wait on itself).
ncclResult_t nccl_send_recv(const void* send, void* recv, size_t n, ncclDataType_t type, int to, int from,
                            ncclComm_t comm, cudaStream_t stream);

}  // namespace megatrain
