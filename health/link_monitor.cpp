#include "health/link_monitor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>


namespace megatrain {
namespace {

constexpr int64_t kProbeBytes = 256 << 10;

}  // namespace

LinkMonitor::LinkMonitor(const HealthOptions& opts, const Comm& world, std::vector<std::string> hosts)
    : opts_(opts), world_(world) {
  if (opts_.link_check_interval <= 0 || world_.size() == 1) return;  // hosts_ empty: off
  hosts_ = std::move(hosts);
  if (world_.rank() == 0 && !opts_.run_dir.empty()) {
    const std::filesystem::path dir = std::filesystem::path(opts_.run_dir) / "reports";
    std::filesystem::create_directories(dir);
    jsonl_.open(dir / "links.jsonl", std::ios::app);
  }
}

void LinkMonitor::step_done(int64_t step) {
  if (hosts_.empty() || step % opts_.link_check_interval != 0) return;
  auto links = probe_ring_links(world_, hosts_, kProbeBytes, 4);
  const LinkVerdict verdict = judge_links(links, hosts_, 3.0, opts_.straggler_min_ms / 1e3);
  std::map<std::string, int> run;
  for (const std::string& h : verdict.hosts) run[h] = run_[h] + 1;
  run_ = std::move(run);
  if (world_.rank() != 0) return;
  for (const auto& [host, probes] : run_)
    if (probes == opts_.straggler_windows) report(step, host, links, probes);  // once per episode
}

void LinkMonitor::report(int64_t step, const std::string& host, const std::vector<LinkSample>& links, int probes) {
  std::vector<int> ranks;
  std::vector<std::string> pairs;
  double slowest = 0.0, reference = 0.0;
  for (const LinkSample& s : links) {
    const bool touches = hosts_[static_cast<size_t>(s.a)] == host || hosts_[static_cast<size_t>(s.b)] == host;
    if (!s.slow || !touches) continue;
    pairs.push_back(fmt::format("{}-{}", s.a, s.b));
    for (int r : {s.a, s.b})
      if (hosts_[static_cast<size_t>(r)] == host) ranks.push_back(r);
    slowest = slowest == 0.0 ? s.bandwidth : std::min(slowest, s.bandwidth);
    for (const LinkSample& t : links)  // the fastest pair of the slow one's kind
      if (t.inter_host == s.inter_host) reference = std::max(reference, t.bandwidth);
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  spdlog::warn("SLOW_LINK step={} host={} ranks=[{}] pairs={} bandwidth={:.1f}MB/s reference={:.0f}MB/s probes={}", step,
               host, fmt::join(ranks, ","), fmt::join(pairs, ","), slowest / 1e6, reference / 1e6, probes);
  if (!jsonl_.is_open()) return;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  jsonl_ << nlohmann::json{{"kind", "SLOW_LINK"}, {"step", step},          {"host", host},
                           {"ranks", ranks},      {"pairs", pairs},        {"bandwidth_mb_s", slowest / 1e6},
                           {"reference_mb_s", reference / 1e6},             {"probes", probes},
                           {"t_wall", std::chrono::duration<double>(now).count()}}
                .dump()
         << "\n"
         << std::flush;
}

}  // namespace megatrain
