// GoogleTest main for multi-rank tests: MPI is initialised around RUN_ALL_TESTS, so every rank runs
// every test in the same order (the rule of comm.h). A failure on any rank makes the job fail.
#include <gtest/gtest.h>

#include "parallel/comm.h"

int main(int argc, char** argv) {
  megatrain::MpiRuntime mpi(&argc, &argv);  // MPI_Init; MPI_Finalize when it goes out of scope
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // Only rank 0 prints the progress lines; failures are printed by every rank.
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}
