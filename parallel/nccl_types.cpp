// ElemType and ReduceOp to NCCL enums (see nccl_types.h).
#include "parallel/nccl_types.h"

#include <fmt/format.h>

#include "kernels/check.h"

namespace megatrain {

ncclDataType_t nccl_data_type(ElemType t) {
  switch (t) {
    case ElemType::f32: return ncclFloat32;
    case ElemType::f64: return ncclFloat64;
    case ElemType::i32: return ncclInt32;
    case ElemType::i64: return ncclInt64;
    case ElemType::u8: return ncclUint8;
    case ElemType::u16: return ncclFloat16;
    case ElemType::bf16: return ncclBfloat16;
  }
  throw Error(fmt::format("NCCL: element type {} is not a megatrain::ElemType (a corrupted value)", static_cast<int>(t)));
}

NcclReduction nccl_reduction(ElemType t, ReduceOp op) {
  if (t == ElemType::u16)
    throw Error("NCCL: uint16_t elements are 16-bit float bits that are moved, not added; use Bf16 for bfloat16 sums");
  if (t == ElemType::bf16 && op != ReduceOp::sum)
    throw Error("NCCL: Bf16 elements support sum only (as on the MPI backend); reduce float32 values for a max");
  switch (op) {
    case ReduceOp::sum: return NcclReduction{nccl_data_type(t), ncclSum};
    case ReduceOp::max: return NcclReduction{nccl_data_type(t), ncclMax};
  }
  throw Error(fmt::format("NCCL: reduction {} is not a megatrain::ReduceOp (a corrupted value)", static_cast<int>(op)));
}

}  // namespace megatrain
