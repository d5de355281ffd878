// Unit tests of the ElemType/ReduceOp → NCCL enum mapping (parallel/nccl_types.h; built with
// MEGATRAIN_CUDA): every type moves as the NCCL type of its width and kind, reductions map to
// ncclSum/ncclMax, and the unsupported ones are errors that say what to use instead.
#include <gtest/gtest.h>

#include <string>

#include "kernels/check.h"
#include "parallel/nccl_types.h"

namespace megatrain {
namespace {

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an Error";
  return "";
}

TEST(NcclTypes, EveryElemTypeMovesAsItsNcclType) {
  EXPECT_EQ(nccl_data_type(ElemType::f32), ncclFloat32);
  EXPECT_EQ(nccl_data_type(ElemType::f64), ncclFloat64);
  EXPECT_EQ(nccl_data_type(ElemType::i32), ncclInt32);
  EXPECT_EQ(nccl_data_type(ElemType::i64), ncclInt64);
  EXPECT_EQ(nccl_data_type(ElemType::u8), ncclUint8);
  EXPECT_EQ(nccl_data_type(ElemType::u16), ncclFloat16);  // 16-bit float bits, moved bit for bit
  EXPECT_EQ(nccl_data_type(ElemType::bf16), ncclBfloat16);
}

TEST(NcclTypes, ReductionsMapToSumAndMax) {
  const NcclReduction f = nccl_reduction(ElemType::f32, ReduceOp::sum);
  EXPECT_EQ(f.type, ncclFloat32);
  EXPECT_EQ(f.op, ncclSum);
  const NcclReduction b = nccl_reduction(ElemType::bf16, ReduceOp::sum);  // Bf16 sums: float adds, bf16 result
  EXPECT_EQ(b.type, ncclBfloat16);
  EXPECT_EQ(b.op, ncclSum);
  const NcclReduction m = nccl_reduction(ElemType::i64, ReduceOp::max);
  EXPECT_EQ(m.type, ncclInt64);
  EXPECT_EQ(m.op, ncclMax);
  EXPECT_EQ(nccl_reduction(ElemType::f64, ReduceOp::max).op, ncclMax);
}

TEST(NcclTypes, UnsupportedOnesSayWhatToUse) {
  EXPECT_NE(error_of([] { nccl_reduction(ElemType::u16, ReduceOp::sum); }).find("use Bf16 for bfloat16 sums"),
            std::string::npos);
  EXPECT_NE(error_of([] { nccl_reduction(ElemType::bf16, ReduceOp::max); }).find("Bf16 elements support sum only"),
            std::string::npos);
  EXPECT_NE(error_of([] { nccl_data_type(static_cast<ElemType>(42)); }).find("element type 42"), std::string::npos);
  EXPECT_NE(error_of([] { nccl_reduction(ElemType::f32, static_cast<ReduceOp>(7)); }).find("reduction 7"),
            std::string::npos);
}

}  // namespace
}  // namespace megatrain
