// The NCCL unique-id bootstrap over MPI: rank 0 of a group creates the id (ncclGetUniqueId in the
// NCCL backend, a fake in tests) and broadcasts its bytes over the group's MPI communicator, so
// every member calls ncclCommInitRank with the same id. Needs no CUDA header: the id is opaque
// bytes here (parallel/comm_nccl.cpp checks the size against ncclUniqueId), so the bootstrap is
// tested on CPU ranks. Invariant: every member returns rank 0's bytes; make_id runs on rank 0 only.
#pragma once
#include <array>
#include <functional>

#include "parallel/comm.h"

namespace megatrain {

inline constexpr int kNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
using NcclUniqueIdBytes = std::array<char, kNcclUniqueIdBytes>;

// Collective over `group` (a host communicator: the bytes live in host memory). When make_id throws
// on rank 0, every member throws: rank 0 its exception, the others a CommError saying that rank 0
// failed (rank 0 broadcasts a status with the id, so no member waits for an id that never comes).
NcclUniqueIdBytes nccl_bootstrap_unique_id(const Comm& group, const std::function<NcclUniqueIdBytes()>& make_id);

}  // namespace megatrain
