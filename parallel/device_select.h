// Which GPU a rank drives: one GPU per rank, the rank's local rank on its node (parallel/launch_env.h)
// indexing the devices that process sees, as torchrun and Megatron do. Pure, so it is unit-tested
// without a GPU; the NCCL backend (parallel/comm_nccl.h) passes it cudaGetDeviceCount.
// Invariant: ranks of one node get distinct devices, or an InputError says why they cannot — on
// every rank of the node alike (it checks the node's rank count, not only this rank's index), so
// no rank goes on to wait in NCCL's initialisation for peers that failed.
#pragma once

namespace megatrain {

// The device index of local rank `local_rank` of `local_size` ranks on this node when the process
// sees `device_count` devices. Throws InputError naming the numbers, and what to change, when the
// node has fewer devices than ranks.
int device_for_local_rank(int local_rank, int local_size, int device_count);

}  // namespace megatrain
