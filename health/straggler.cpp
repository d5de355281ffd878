#include "health/straggler.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "health/median.h"
#include "parallel/comm_gather.h"

namespace megatrain {

StragglerScorer::StragglerScorer(const HealthOptions& opts, int ranks)
    : opts_(opts),
      history_(static_cast<size_t>(ranks)),
      relative_run_(static_cast<size_t>(ranks), 0),
      individual_run_(static_cast<size_t>(ranks), 0) {}

std::vector<StragglerReport> StragglerScorer::add_window(int64_t last_step, const std::vector<std::vector<double>>& compute_ms,
                                                         const std::vector<std::vector<double>>& wait_ms) {
  const size_t ranks = compute_ms.size(), steps = compute_ms.empty() ? 0 : compute_ms[0].size();
  std::vector<StragglerReport> out;
  std::vector<double> med(ranks);
  for (size_t r = 0; r < ranks; ++r) med[r] = median(compute_ms[r]);
  const double fastest = *std::min_element(med.begin(), med.end());
  // Who waited least, step by step: the rank the others waited for.
  std::vector<int> least(ranks, 0);
  for (size_t i = 0; i < steps; ++i) {
    size_t who = 0;
    for (size_t r = 1; r < ranks; ++r)
      if (wait_ms[r][i] < wait_ms[who][i]) who = r;
    ++least[who];
  }
  for (size_t r = 0; r < ranks; ++r) {
    const double last_arrival = steps ? static_cast<double>(least[r]) / static_cast<double>(steps) : 0.0;
    const auto step_of = [&](size_t i) { return last_step - static_cast<int64_t>(steps - 1 - i); };
    for (size_t i = 0; i < steps; ++i)  // one-off hiccups
      if (compute_ms[r][i] > opts_.slow_step_factor * med[r] && compute_ms[r][i] - med[r] >= 10.0 * opts_.straggler_min_ms)
        out.push_back({"SLOW_STEP", static_cast<int>(r), step_of(i), med[r] / compute_ms[r][i], med[r], med[r],
                       compute_ms[r][i], last_arrival, 0});
    const double rel = med[r] > 0.0 ? fastest / med[r] : 1.0;
    const bool slow_rel = rel < opts_.straggler_threshold && med[r] - fastest >= opts_.straggler_min_ms;
    relative_run_[r] = slow_rel ? relative_run_[r] + 1 : 0;
    if (relative_run_[r] >= opts_.straggler_windows)
      out.push_back({"STRAGGLER", static_cast<int>(r), last_step, rel, med[r], fastest, 0.0, last_arrival, relative_run_[r]});
    // Its own reference: the lower quartile of its past window medians (one lucky window does not
    // set the bar); none yet in the first window.
    std::vector<double>& past = history_[r];
    double best = med[r];
    if (!past.empty()) {
      std::vector<double> sorted = past;
      std::sort(sorted.begin(), sorted.end());
      best = sorted[(sorted.size() - 1) / 4];
    }
    const double ind = med[r] > 0.0 ? best / med[r] : 1.0;
    const bool slow_ind = ind < opts_.straggler_threshold && med[r] - best >= opts_.straggler_min_ms;
    individual_run_[r] = slow_ind ? individual_run_[r] + 1 : 0;
    if (individual_run_[r] >= opts_.straggler_windows)
      out.push_back({"INDIVIDUAL_DEGRADATION", static_cast<int>(r), last_step, ind, med[r], best, 0.0, last_arrival,
                     individual_run_[r]});
    past.push_back(med[r]);
  }
  return out;
}

StragglerDetector::StragglerDetector(const HealthOptions& opts, const Comm& world, int node,
                                     std::vector<std::string> hosts)
    : opts_(opts), world_(world), scorer_(opts, world.size()), hosts_(std::move(hosts)) {
  if (opts_.straggler_window <= 0) return;
  nodes_ = all_gather_value<int32_t>(world_, node);
  if (world_.rank() == 0 && !opts_.run_dir.empty()) {
    const std::filesystem::path dir = std::filesystem::path(opts_.run_dir) / "reports";
    std::filesystem::create_directories(dir);
    jsonl_.open(dir / "straggler.jsonl", std::ios::app);
  }
}

void StragglerDetector::step_done(int64_t step, double compute_ms, double wait_ms) {
  if (opts_.straggler_window <= 0) return;
  compute_.push_back(compute_ms);
  wait_.push_back(wait_ms);
  const auto w = static_cast<size_t>(opts_.straggler_window);
  if (compute_.size() < w) return;
  const auto p = static_cast<size_t>(world_.size());
  std::vector<double> mine(compute_);
  mine.insert(mine.end(), wait_.begin(), wait_.end());
  std::vector<double> all(p * 2 * w);
  world_.all_gather(all.data(), mine.data(), std::vector<int64_t>(p, static_cast<int64_t>(2 * w))).wait();
  compute_.clear(), wait_.clear();
  std::vector<std::vector<double>> c(p), wt(p);
  for (size_t r = 0; r < p; ++r) {
    const double* base = all.data() + r * 2 * w;
    c[r].assign(base, base + w);
    wt[r].assign(base + w, base + 2 * w);
  }
  const std::vector<StragglerReport> reports = scorer_.add_window(step, c, wt);
  if (world_.rank() == 0)
    for (const StragglerReport& r : reports) report(r, nodes_, hosts_);
}

void StragglerDetector::report(const StragglerReport& r, const std::vector<int32_t>& nodes,
                               const std::vector<std::string>& hosts) {
  const auto i = static_cast<size_t>(r.rank);
  if (r.kind == "SLOW_STEP")
    spdlog::warn("SLOW_STEP step={} rank={} host={} compute={:.1f}ms median={:.1f}ms", r.step, r.rank, hosts[i],
                 r.step_ms, r.median_ms);
  else
    spdlog::warn("{} rank={} host={} node={} section=compute score={:.2f} median={:.1f}ms best={:.1f}ms "
                 "last_arrival={:.2f} windows={} step={}",
                 r.kind, r.rank, hosts[i], nodes[i], r.score, r.median_ms, r.best_ms, r.last_arrival, r.windows, r.step);
  if (!jsonl_.is_open()) return;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  jsonl_ << nlohmann::json{{"kind", r.kind},       {"rank", r.rank},         {"host", hosts[i]},
                           {"node", nodes[i]},     {"step", r.step},         {"section", "compute"},
                           {"score", r.score},     {"median_ms", r.median_ms}, {"best_ms", r.best_ms}, {"step_ms", r.step_ms},
                           {"last_arrival", r.last_arrival}, {"windows", r.windows},
                           {"t_wall", std::chrono::duration<double>(now).count()}}
                .dump()
         << "\n"
         << std::flush;
}

}  // namespace megatrain
