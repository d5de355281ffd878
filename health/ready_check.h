// The start-up roll call (docs/robustness.md R24): before training, every rank reports to rank 0,
// which waits at most `timeout_s` for all of them (the trainer: nine tenths of
// health.init_timeout_s, so the roll call speaks before the watchdogs' init timeout fires). A rank stuck before it (in I/O, in its
// initialisation, stopped) is named — "INIT_TIMEOUT missing ranks=[2] after 10 s" — and rank 0
// throws CommError (exit code 75; main then ends the job), instead of every rank waiting forever
// in the first collective. Collective over `world`.
#pragma once
#include "parallel/comm.h"

namespace megatrain {

void wait_for_all_ranks(const Comm& world, double timeout_s);

}  // namespace megatrain
