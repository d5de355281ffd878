// The NCCL backend of Comm (docs/architecture.md §Communication; built only with MEGATRAIN_CUDA). Each
// communicator holds an NCCL communicator, its own CUDA stream, and an MPI communicator of the same
// ranks in the same order for the small host exchanges.
//
// The compute-stream handshake. The caller's stream reaches the communicator once, through
// Comm::set_stream(Stream{Device::cuda, handle}) (default: the CUDA default stream); communicators
// split from it inherit it. The trainer sets it on the world before building ProcessGroups, or on
// each group. A per-communicator stream was chosen over a stream argument on every collective so
// that code written against Comm (ZeRO, grad buckets, expert dispatch) runs on either backend
// unchanged. For each device operation:
//   1. an event recorded on the caller's stream, which the group's stream waits for, so the
//      operation reads its input after the kernels that wrote it;
//   2. the NCCL call(s) on the group's stream, then a completion event recorded there;
//   3. Work::wait() (WaitMode::stream) makes the caller's current stream wait for that event and
//      returns at once; WaitMode::host blocks until the progress thread has seen it complete.
// A progress thread per communicator polls completion events and ncclCommGetAsyncError, finishing
// Works (stats, flight recorder) as the MPI backend's does.
//
// Where an operation runs: a call whose buffers are device (or managed) memory goes to NCCL; one
// whose buffers are host memory goes to the MPI communicator (counts, flags, timings: Comm code that
// exchanges host values keeps working on an NCCL communicator); a call mixing the two is an Error;
// a call with no buffer on this rank (all null: nothing to move here) goes to NCCL. barrier() is a
// host barrier on the MPI communicator: it does not wait for device operations in flight (wait on
// their Works first).
//
// Differences from the MPI backend: NCCL has no tags, so point-to-point messages between two ranks
// match in issue order whatever their tags (tags are still checked against max_tag()), and a send
// and a receive issued in turn on one rank run in that order on its stream (post a receive ahead of
// a send only where the peer does the same). uint16_t (16-bit float bits) are moved as ncclFloat16,
// bit for bit. Large counts need no splitting (NCCL takes size_t counts).
//
// Errors (comm.h rule 3, same "rank R group 'NAME': OPERATION failed: WHY" text): an NCCL or CUDA
// error at issue throws there; an asynchronous NCCL error (ncclCommGetAsyncError), a failed
// completion event, or an operation still incomplete NcclOptions::timeout_s after its issue makes
// the communicator call ncclCommAbort, fail every Work in flight, and throw from every later
// wait() and issue. A rank blocked inside an NCCL call (a connection set-up that waits for a dead
// peer) is not reached by this timeout: the health watchdog (health/watchdog.h) ends it.
#pragma once
#include "parallel/comm.h"
#include "parallel/groups.h"

namespace megatrain {

struct NcclOptions {
  // An operation not complete this long after it was issued aborts the communicator (the c10d
  // default of 10 minutes: longer than any collective of a healthy job, short of a lost night).
  double timeout_s = 600;
  // How long the progress thread sleeps between polls of the operations in flight.
  int progress_poll_us = 100;
};

// Collective over `world` (an MPI communicator of every rank): selects this rank's GPU by its local
// rank (parallel/device_select.h) and makes it current, duplicates `world` for the host exchanges,
// bootstraps the NCCL unique id over it (parallel/nccl_bootstrap.h) and initialises the NCCL
// communicator. Throws InputError when the node has too few GPUs, CommError when NCCL fails.
Comm make_nccl_world(const Comm& world, const NcclOptions& options = {});

// ProcessGroups whose every communicator is NCCL: make_nccl_world, then ProcessGroups' splits,
// each an MPI_Comm_split and an ncclCommSplit with the same color and key (group_split), checked
// to give this rank the same rank and size in both.
ProcessGroups nccl_process_groups(const Comm& world, const ParallelDims& dims, const NcclOptions& options = {});

}  // namespace megatrain
