// The optimizer tests' layout: one tensor of each parameter group, sizes not multiples of the
// vector width.
#pragma once
#include "model/params.h"

namespace megatrain::test {

inline ParamLayout mixed_layout() {
  return ParamLayout({{"wte", Shape{5, 7}, TpSplit::rows, {}, ParamGroup::embedding},
                      {"w", Shape{9, 3}, TpSplit::rows, {}, ParamGroup::matrix},
                      {"norm", Shape{11}, TpSplit::replicated, {}, ParamGroup::norm, InitKind::ones},
                      {"b", Shape{13}, TpSplit::replicated, {}, ParamGroup::bias, InitKind::zeros}},
                     TpCoord{});
}

}  // namespace megatrain::test
