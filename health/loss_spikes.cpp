#include "health/loss_spikes.h"

#include "health/median.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace megatrain {

double LossSpikes::reference() const {
  return window_.size() < 10 ? 0.0 : median({window_.begin(), window_.end()});
}

bool LossSpikes::check(int64_t step, double loss, bool log) {
  if (opts_.spike_factor <= 0.0 || !std::isfinite(loss)) return false;
  const double ref = reference();
  if (ref > 0.0 && loss >= opts_.spike_factor * ref) {
    if (log)
      spdlog::warn("LOSS_SPIKE step={} value={:.4g} ref={:.4g} policy={}: the loss is {:.1f}× the median of the last {} "
                   "steps{}",
                   step, loss, ref, opts_.on_spike, loss / ref, window_.size(),
                   opts_.on_spike == "skip"       ? "; the update is skipped"
                   : opts_.on_spike == "rollback" ? "; rolling back to the last checkpoint"
                                                  : "");
    return true;
  }
  window_.push_back(loss);
  if (static_cast<int>(window_.size()) > opts_.spike_window) window_.pop_front();
  return false;
}

}  // namespace megatrain
