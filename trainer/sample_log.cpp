#include "trainer/sample_log.h"

#include <fmt/format.h>

#include "trainer/rank_run.h"
#include "trainer/run_state.h"

namespace megatrain {

SampleLog::SampleLog(const Config& cfg, RankRun& run, const RunState& at)
    : run_(run), at_(at), on_(!cfg.log.samples_file.empty()),
      rows_(run.world().rank() == 0 ? cfg.log.samples_file : "", "log.samples_file", at.step) {}

void SampleLog::end(const StepOutcome& out) {
  if (!on_) return;
  const int64_t batch = out.step - 1 + at_.data_skip;
  const SampleDigest d = run_.take_samples(batch);
  int64_t parts[3] = {d.samples, static_cast<int64_t>(d.sum & 0xffffffffu), static_cast<int64_t>(d.sum >> 32)};
  run_.world().all_reduce(parts, 3).wait();
  if (run_.world().rank() != 0) return;
  const uint64_t sum = (static_cast<uint64_t>(parts[2]) << 32) + static_cast<uint64_t>(parts[1]);
  rows_.write(fmt::format(R"({{"step":{},"batch":{},"samples":{},"digest":"{:016x}"}})", out.step, batch, parts[0], sum));
}

}  // namespace megatrain
