#include "health/heartbeat.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "health/flight_dump.h"
#include "parallel/flight_recorder.h"

namespace megatrain {
namespace {

double resident_mib() {
  std::ifstream statm("/proc/self/statm");
  long long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1 << 20);
}

}  // namespace

Heartbeat::Heartbeat(const HealthOptions& opts, const Progress& progress, int rank, int node, std::string host)
    : opts_(opts),
      progress_(progress),
      rank_(rank),
      node_(node),
      host_(std::move(host)),
      path_(opts.run_dir.empty() ? ""
                                 : (std::filesystem::path(opts.run_dir) / "hb" / fmt::format("rank_{}.json", rank)).string()) {
  if (path_.empty() || opts_.heartbeat_interval_s <= 0.0) return;
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    do beat(false);
    while (!cv_.wait_for(lock, std::chrono::duration<double>(opts_.heartbeat_interval_s), [&] { return stop_; }));
  });
}

Heartbeat::~Heartbeat() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  beat(true);
}

void Heartbeat::beat(bool last) const {
  const double loss = progress_.loss();
  nlohmann::json j = {
      {"rank", rank_}, {"host", host_}, {"node", node_}, {"pid", static_cast<long>(::getpid())},
      {"step", progress_.step()}, {"section", section_name(progress_.section())},
      {"coll_seq", FlightRecorder::instance().completed()}, {"rss_mb", std::round(resident_mib())},
      {"t_wall", std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()},
      {"t_mono", FlightRecorder::now()}, {"interval_s", opts_.heartbeat_interval_s}};
  if (last) j["final"] = true;
  j["last_loss"] = std::isfinite(loss) ? nlohmann::json(loss) : nlohmann::json(nullptr);
  write_file_atomic(path_, j.dump() + "\n");
}

}  // namespace megatrain
