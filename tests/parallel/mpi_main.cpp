// GoogleTest main for multi-rank tests: MPI is initialised around RUN_ALL_TESTS, so every rank runs
// every test in the same order (the rule of comm.h). A failure on any rank makes the job fail.
// Skips are skips: a run whose every test skipped exits 77 (ctest's SKIP_RETURN_CODE, so it shows
// as skipped); a run that passed some tests and skipped others fails, since ctest would show it as
// passed — register a test only at the world sizes where it runs (tests/parallel/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cstdio>

#include "parallel/comm.h"

namespace {
constexpr int kSkipped = 77;  // SKIP_RETURN_CODE of every multi-rank test
}  // namespace

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
  const int failed = RUN_ALL_TESTS();
  const auto& unit = *::testing::UnitTest::GetInstance();
  if (failed != 0 || unit.skipped_test_count() == 0) return failed;
  if (unit.successful_test_count() == 0) return kSkipped;
  std::fprintf(stderr, "[rank %d] %d tests skipped in a run that passed others; ctest would call the skips passed: "
               "exclude them at this world size with --gtest_filter (tests/parallel/CMakeLists.txt)\n", rank,
               unit.skipped_test_count());
  return 1;
}
