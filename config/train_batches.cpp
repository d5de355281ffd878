#include "config/train_batches.h"

#include <fmt/format.h>

#include "kernels/check.h"
#include "parallel/pipeline_schedule.h"

namespace megatrain {

BatchSizes train_batch_sizes(const Config& c) {
  const TrainConfig& t = c.train;
  if (t.rampup_batch_size.empty()) return BatchSizes(t.global_batch_size);
  const std::vector<int64_t>& r = t.rampup_batch_size;
  MT_INPUT_CHECK(r.size() == 3,
                 "{}: train.rampup_batch_size = [{}] must be [start, increment, samples], as "
                 "Megatron's --rampup-batch-size; or [] for a constant batch",
                 c.source, fmt::join(r, ", "));
  try {
    return BatchSizes(t.global_batch_size, {r[0], r[1], r[2]});
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: train.rampup_batch_size = [{}] with train.global_batch_size = {}: {}", c.source,
                                 fmt::join(r, ", "), t.global_batch_size, e.what()));
  }
}

void check_train_batches(const Config& c) {
  const TrainConfig& t = c.train;
  const int64_t per_step = int64_t{t.micro_batch_size} * c.parallel.dp;
  const bool ramp = !t.rampup_batch_size.empty();
  const std::string key = ramp ? "a batch size of train.rampup_batch_size" : "train.global_batch_size";
  for (const int64_t size : train_batch_sizes(c).sizes()) {
    MT_INPUT_CHECK(size % per_step == 0,
                   "{}: {} = {} is not divisible by train.micro_batch_size · dp = {} · {} = {}; pick a multiple of "
                   "{}{}",
                   c.source, key, size, t.micro_batch_size, c.parallel.dp, per_step, per_step,
                   ramp ? " for start and increment" : fmt::format(" (or 0 for {})", per_step));
    const int micro = micro_batches_of(c, size);
    const ParallelConfig& p = c.parallel;
    const std::string pipe = schedule_problem(p.pipeline_schedule, {p.pp, micro, p.virtual_stages});
    MT_INPUT_CHECK(pipe.empty(), "{}: parallel.pipeline_schedule: {} ({} = {}: {} micro-batches per step); adjust {}",
                   c.source, pipe, key, size, micro, ramp ? "train.rampup_batch_size" : "train.global_batch_size");
  }
}

}  // namespace megatrain
