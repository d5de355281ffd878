// Unit tests (no MPI) of parallel/launch_env.h: each launcher's variables in the documented order,
// the fallback 0/1, SLURM_TASKS_PER_NODE's compressed form, and an InputError naming a malformed
// variable. Each test starts and ends with every variable unset.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/check.h"
#include "parallel/launch_env.h"
#include "tests/input_error.h"

namespace megatrain {
namespace {

class LaunchEnv : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_LOCALID",
                          "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NODEID", "MPI_LOCALRANKID",
                          "MPI_LOCALNRANKS", "MEGATRAIN_RANKS_PER_NODE", "MEGATRAIN_ATTEMPT"})
      unsetenv(v);
  }
  static void set(const char* var, const char* value) { setenv(var, value, 1); }
};

// megatrain's own integers: MEGATRAIN_RANKS_PER_NODE groups ranks into virtual hosts (else the
// launcher's local size), MEGATRAIN_ATTEMPT (read through int_from_env) counts launches.
TEST_F(LaunchEnv, MegatrainIntegersAreReadOrRejectedByName) {
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  EXPECT_EQ(ranks_per_node_from_env(), 4);
  set("MEGATRAIN_RANKS_PER_NODE", "2");
  EXPECT_EQ(ranks_per_node_from_env(), 2);
  set("MEGATRAIN_RANKS_PER_NODE", "0");
  EXPECT_NE(test::input_error_of([] { ranks_per_node_from_env(); }).find("MEGATRAIN_RANKS_PER_NODE='0'"), std::string::npos);
  EXPECT_EQ(int_from_env("MEGATRAIN_ATTEMPT", 1, 1), 1);
  set("MEGATRAIN_ATTEMPT", "3");
  EXPECT_EQ(int_from_env("MEGATRAIN_ATTEMPT", 1, 1), 3);
  set("MEGATRAIN_ATTEMPT", "two");
  EXPECT_NE(test::input_error_of([] { int_from_env("MEGATRAIN_ATTEMPT", 1, 1); }).find("MEGATRAIN_ATTEMPT='two': expected an "
                                                                                 "integer >= 1"),
            std::string::npos);
}

TEST_F(LaunchEnv, FallsBackToRankZeroOfOne) {
  EXPECT_EQ(local_rank_from_env(), 0);
  EXPECT_EQ(local_size_from_env(), 1);
}

TEST_F(LaunchEnv, ReadsLaunchersInOrder) {
  set("MPI_LOCALRANKID", "5");
  set("MPI_LOCALNRANKS", "6");
  EXPECT_EQ(local_rank_from_env(), 5);
  EXPECT_EQ(local_size_from_env(), 6);
  set("SLURM_LOCALID", "3");
  set("SLURM_TASKS_PER_NODE", "4");
  EXPECT_EQ(local_rank_from_env(), 3);
  EXPECT_EQ(local_size_from_env(), 4);
  set("SLURM_NTASKS_PER_NODE", "8");
  EXPECT_EQ(local_size_from_env(), 8);
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  EXPECT_EQ(local_rank_from_env(), 1);
  EXPECT_EQ(local_size_from_env(), 2);
}

TEST_F(LaunchEnv, SlurmTasksPerNodeCompressedForm) {
  set("SLURM_TASKS_PER_NODE", "4(x3)");
  EXPECT_EQ(local_size_from_env(), 4);
  set("SLURM_TASKS_PER_NODE", "2(x3),1");
  set("SLURM_NODEID", "3");
  EXPECT_EQ(local_size_from_env(), 1);
  set("SLURM_NODEID", "1");
  EXPECT_EQ(local_size_from_env(), 2);
}

using test::input_error_of;

TEST_F(LaunchEnv, MalformedValueNamesTheVariable) {
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1x");
  EXPECT_NE(input_error_of([] { local_rank_from_env(); }).find("OMPI_COMM_WORLD_LOCAL_RANK='1x'"), std::string::npos);
  set("SLURM_LOCALID", "-1");
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT_NE(input_error_of([] { local_rank_from_env(); }).find("SLURM_LOCALID"), std::string::npos);
  set("MPI_LOCALNRANKS", "0");
  EXPECT_NE(input_error_of([] { local_size_from_env(); }).find("MPI_LOCALNRANKS"), std::string::npos);
  set("SLURM_TASKS_PER_NODE", "2(x");
  EXPECT_NE(input_error_of([] { local_size_from_env(); }).find("SLURM_TASKS_PER_NODE"), std::string::npos);
  set("SLURM_TASKS_PER_NODE", "2,3");
  EXPECT_NE(input_error_of([] { local_size_from_env(); }).find("SLURM_NODEID is not set"), std::string::npos);
}

}  // namespace
}  // namespace megatrain
