// kernels/cuda/cublas_lib.h without a GPU: both libraries open, every entry resolves, and the ones
// that need no device answer (their status strings); the binary itself does not link them.
#include "kernels/cuda/cublas_lib.h"

#include <gtest/gtest.h>

#include <string>

namespace megatrain {
namespace {

TEST(CublasLib, OpensBothLibrariesAndTheirEntriesAnswer) {
  const CublasLib& f = cublas_lib();
  EXPECT_EQ(std::string(f.GetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)),
            "the requested functionality is not supported");
  EXPECT_EQ(std::string(f.LtGetStatusString(CUBLAS_STATUS_INVALID_VALUE)),
            "an unsupported value or parameter was passed to the function");
  EXPECT_EQ(&cublas_lib(), &f);  // opened once
}

}  // namespace
}  // namespace megatrain
