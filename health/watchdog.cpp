#include "health/watchdog.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "health/exit_codes.h"
#include "health/flight_dump.h"
#include "parallel/flight_recorder.h"

namespace megatrain {
namespace {

constexpr double kGraceS = 0.5;  // between a watchdog's dump and its exit: its peers' time to dump
constexpr double kProbeS = 1.0;  // the longest a fired watchdog waits for connections to its peers
constexpr size_t kKeptStretches = 8;  // unscheduled stretches a dump carries

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The oldest operation still in flight: "all_reduce group 'dp' seq=57 issued 2.1 s ago", or "none".
std::string oldest_in_flight(const FlightSnapshot& s) {
  for (const FlightRecord& r : s.records)
    if (r.state == FlightState::in_flight)
      return fmt::format("{} group '{}' {}seq={} issued {:.1f} s ago", r.op, s.groups[static_cast<size_t>(r.group)].name,
                         r.peer >= 0 ? fmt::format("peer={} ", r.peer) : "", r.seq, s.now - r.t_issue);
  return "none";
}

}  // namespace

Watchdog::Watchdog(const HealthOptions& opts, const Progress& progress, int rank, std::string host)
    : opts_(opts), progress_(progress), rank_(rank), host_(std::move(host)) {
  if (opts_.watchdog) thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::step_done(double seconds, const Comm& world) {
  if (!opts_.watchdog || steps_seen_ > opts_.calibrate_steps) return;
  slowest_ = std::max(slowest_, seconds);
  if (++steps_seen_ <= opts_.calibrate_steps) {  // the steps before this one were observed
    provisional_.store(std::max(opts_.step_timeout_floor_s, opts_.step_timeout_factor * slowest_));
    return;
  }
  double slowest = slowest_;
  world.all_reduce(&slowest, 1, ReduceOp::max).wait();
  const double t = std::max(opts_.step_timeout_floor_s, opts_.step_timeout_factor * slowest);
  step_timeout_.store(t);
  if (world.rank() == 0)
    spdlog::info("watchdog: step timeout {:.3g} s = max(health.step_timeout_floor_s = {:g}, {:g} × the slowest of "
                 "the first {} steps, {:.3g} s)",
                 t, opts_.step_timeout_floor_s, opts_.step_timeout_factor, opts_.calibrate_steps, slowest);
}

double Watchdog::step_timeout() const { return step_timeout_.load(); }

void Watchdog::expect_first_step(double seconds) {
  if (!opts_.watchdog || seconds <= 0.0) return;
  const double t = std::min(opts_.init_timeout_s, std::max({opts_.step_timeout_floor_s, kFirstStepMinS,
                                                            kFirstStepSlack * opts_.step_timeout_factor * seconds}));
  first_step_.store(t);
  if (rank_ == 0)
    spdlog::info("watchdog: first step timeout {:.3g} s (its FLOPs at the measured peak take {:.3g} s; until the "
                 "timeout is calibrated, {:g} × the slowest step so far, at least {:g} s)",
                 t, seconds, opts_.step_timeout_factor, opts_.step_timeout_floor_s);
}

void Watchdog::set_peers(std::vector<PeerAddress> peers) {
  std::lock_guard lock(mu_);
  peers_ = std::move(peers);
}

double Watchdog::timeout(Section s) const {
  switch (s) {
    case Section::init:
      return progress_.step() > 0 && first_step_.load() > 0.0 ? first_step_.load() : opts_.init_timeout_s;
    case Section::step:
      if (step_timeout() > 0.0) return step_timeout();
      return provisional_.load() > 0.0 ? provisional_.load() : opts_.init_timeout_s;
    case Section::eval:
    case Section::checkpoint: return opts_.io_timeout_s;
  }
  return opts_.init_timeout_s;
}

void Watchdog::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    const double poll = std::clamp(timeout(progress_.section()) / 20.0, 0.02, 1.0);
    const double steady_from = FlightRecorder::now(), wall_from = wall_now();
    if (cv_.wait_for(lock, std::chrono::duration<double>(poll), [&] { return stop_; })) return;
    // The section may have changed while waiting: judge by the one in force now.
    const Section now_in = progress_.section();
    const double now = FlightRecorder::now(), stale = now - progress_.last_progress(), slept = now - steady_from;
    if (slept > poll + kUnscheduledS) {
      note_unscheduled(poll, wall_from, now_in, stale);
      if (slept - poll > timeout(now_in)) fire(now_in, stale, timeout(now_in), false);
    }
    if (stale > timeout(now_in)) fire(now_in, stale, timeout(now_in), true);
  }
}

void Watchdog::note_unscheduled(double asked_s, double wall_from, Section s, double stale) {
  const Unscheduled u{wall_from + asked_s, wall_now()};
  if (unscheduled_.size() == kKeptStretches) unscheduled_.erase(unscheduled_.begin());
  unscheduled_.push_back(u);
  FlightDump d = dump(s, stale);
  d.reason = fmt::format("watchdog: this rank was not scheduled for {:.1f} s in section {} (frozen: SIGSTOP, a "
                         "paused VM or container, a host stall); written when it ran again",
                         u.seconds(), d.section);
  std::fprintf(stderr, "UNSCHEDULED rank=%d host=%s for=%.1fs from=%.3f to=%.3f dump=%s\n", rank_, host_.c_str(),
               u.seconds(), u.from_wall, u.to_wall, write(d).c_str());
  std::fflush(stderr);
}

FlightDump Watchdog::dump(Section s, double stale) const {
  FlightDump d;
  d.rank = rank_, d.host = host_, d.pid = static_cast<long>(::getpid());
  d.section = section_name(s), d.step = progress_.step(), d.t_wall = wall_now();
  d.stale_s = stale, d.unscheduled = unscheduled_;
  d.snapshot = FlightRecorder::instance().snapshot();
  return d;
}

std::string Watchdog::write(const FlightDump& d) const {
  if (opts_.run_dir.empty()) return "none (health.run_dir is empty)";
  const std::string path = (std::filesystem::path(opts_.run_dir) / "fr" / fmt::format("rank_{}.json", rank_)).string();
  return write_file_atomic(path, flight_dump_json(d)) ? path : "FAILED to write " + path;
}

void Watchdog::fire(Section s, double stale, double limit, bool probe) {
  FlightDump d = dump(s, stale);
  d.reason = probe ? fmt::format("watchdog: no progress for {:.1f} s in section {} (timeout {:.3g} s)", stale,
                                 d.section, limit)
                   : fmt::format("watchdog: this rank was not scheduled for {:.1f} s in section {}, longer than its "
                                 "timeout {:.3g} s (frozen: SIGSTOP, a paused VM or container, a host stall)",
                                 d.unscheduled.back().seconds(), d.section, limit);
  std::vector<int> unreachable;
  if (probe && !peers_.empty()) {
    const std::vector<Reach> reach = probe_peers(peers_, rank_, kProbeS);
    for (size_t r = 0; r < reach.size(); ++r) {
      if (static_cast<int>(r) == rank_) continue;
      d.peers.push_back({static_cast<int>(r), peers_[r].host, reach_name(reach[r])});
      if (reach[r] == Reach::refused || reach[r] == Reach::silent) unreachable.push_back(static_cast<int>(r));
    }
  }
  const std::string where = write(d);
  std::fprintf(stderr,
               "WATCHDOG rank=%d host=%s section=%s step=%lld coll_seq=%lld timeout=%.3gs stale_for=%.1fs in_flight=\"%s\" "
               "dump=%s t_wall=%.3f%s%s\n",
               rank_, host_.c_str(), d.section.c_str(), d.step, static_cast<long long>(d.snapshot.completed), limit,
               stale, oldest_in_flight(d.snapshot).c_str(), where.c_str(), d.t_wall,
               unreachable.empty() ? "" : fmt::format(" unreachable=[{}]", fmt::join(unreachable, ",")).c_str(),
               d.unscheduled.empty() ? "" : fmt::format(" unscheduled={:.1f}s", d.unscheduled.back().seconds()).c_str());
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::duration<double>(kGraceS));
  std::_Exit(kExitHang);
}

}  // namespace megatrain
