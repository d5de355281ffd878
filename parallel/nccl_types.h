// Comm's element types and reductions as NCCL enums (built only with MEGATRAIN_CUDA: needs nccl.h).
// Invariant: a mapping either names the NCCL enum that moves or reduces exactly what Comm's MPI
// backend does, or throws — no silent reinterpretation of the bits.
#pragma once
#include <nccl.h>

#include "parallel/comm.h"

namespace megatrain {

// The NCCL type that moves elements of `t` (all_gather, broadcast, send/recv, all_to_all). uint16_t
// holds 16-bit float bits that are moved, never added: ncclFloat16 carries them bit for bit.
// Throws Error for a value outside ElemType.
ncclDataType_t nccl_data_type(ElemType t);

struct NcclReduction {
  ncclDataType_t type;
  ncclRedOp_t op;
};
// The NCCL type and operation that reduce elements of `t` with `op` (all_reduce, reduce_scatter).
// Throws Error for uint16_t (bits, not numbers: use Bf16 for bfloat16 sums), for a max of Bf16
// (Comm supports Bf16 sums only, as its MPI backend does), and for values outside the enums.
NcclReduction nccl_reduction(ElemType t, ReduceOp op);

}  // namespace megatrain
