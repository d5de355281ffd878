// Where a run computes and how its ranks talk ([Note: a run on a device] in trainer/rank_run.h): the
// compute stream of train.device, and the process groups over MPI's communicators, or NCCL's for a
// GPU's memory — with the device backend's errors turned into InputErrors naming the config key.
#pragma once
#include "config/config.h"
#include "kernels/device.h"
#include "parallel/groups.h"

namespace megatrain {

// The device's default stream, at train.precision.
Stream run_stream(const Config& c);
// The groups of c.parallel's layout over `world`.
ProcessGroups process_groups(const Config& c, const Comm& world);

}  // namespace megatrain
