// Where this process sits on its node, read from the launcher's environment: mpirun (Open MPI),
// srun (Slurm), then MPICH/hydra; a process started by none of them is local rank 0 of 1.
// Invariant: a variable that is set is used or rejected — a malformed value is an InputError
// naming the variable, never a silent fallback.
#pragma once

namespace megatrain {

// OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID; else 0.
int local_rank_from_env();
// OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_NTASKS_PER_NODE, SLURM_TASKS_PER_NODE ("2(x3),1": this node's
// entry, chosen by SLURM_NODEID when the entries differ), MPI_LOCALNRANKS; else 1.
int local_size_from_env();
// The integer in environment variable `var` (≥ `min`), or `fallback` when it is unset or empty; a
// malformed value is an InputError naming the variable.
int int_from_env(const char* var, int min, int fallback);
// Ranks per host for grouping ranks into hosts (heartbeats, straggler reports): MEGATRAIN_RANKS_PER_NODE
// when set (virtual hosts on one machine, for tests), else local_size_from_env().
int ranks_per_node_from_env();

}  // namespace megatrain
