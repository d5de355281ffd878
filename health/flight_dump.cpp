#include "health/flight_dump.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "kernels/check.h"

namespace megatrain {
namespace {

const char* state_name(FlightState s) {
  switch (s) {
    case FlightState::in_flight: return "in_flight";
    case FlightState::done: return "done";
    case FlightState::failed: return "failed";
  }
  return "?";
}

FlightState state_of(const std::string& s, const std::string& source) {
  if (s == "in_flight") return FlightState::in_flight;
  if (s == "done") return FlightState::done;
  MT_DATA_CHECK(s == "failed", "{}: operation state \"{}\" is not in_flight, done or failed", source, s);
  return FlightState::failed;
}

}  // namespace

std::string flight_dump_json(const FlightDump& d) {
  nlohmann::json j;
  j["rank"] = d.rank, j["host"] = d.host, j["pid"] = d.pid, j["reason"] = d.reason;
  j["section"] = d.section, j["step"] = d.step, j["t_wall"] = d.t_wall, j["t_now"] = d.snapshot.now;
  j["completed"] = d.snapshot.completed;
  j["groups"] = nlohmann::json::array();
  for (const FlightGroup& g : d.snapshot.groups) j["groups"].push_back({{"name", g.name}, {"members", g.members}});
  j["ops"] = nlohmann::json::array();
  for (const FlightRecord& r : d.snapshot.records)
    j["ops"].push_back({{"id", r.id}, {"group", r.group}, {"seq", r.seq}, {"op", r.op}, {"count", r.count},
                        {"dtype", r.dtype}, {"peer", r.peer}, {"t_issue", r.t_issue}, {"t_end", r.t_end},
                        {"state", state_name(r.state)}});
  j["peers"] = nlohmann::json::array();
  for (const PeerStatus& p : d.peers) j["peers"].push_back({{"rank", p.rank}, {"host", p.host}, {"reach", p.reach}});
  j["stale_s"] = d.stale_s;
  j["unscheduled"] = nlohmann::json::array();
  for (const Unscheduled& u : d.unscheduled) j["unscheduled"].push_back({{"from", u.from_wall}, {"to", u.to_wall}});
  return j.dump(1) + "\n";
}

FlightDump parse_flight_dump(const std::string& text, const std::string& source) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    FlightDump d;
    d.rank = j.at("rank"), d.host = j.at("host"), d.pid = j.at("pid"), d.reason = j.at("reason");
    d.section = j.at("section"), d.step = j.at("step"), d.t_wall = j.at("t_wall");
    d.snapshot.now = j.at("t_now"), d.snapshot.completed = j.at("completed");
    for (const auto& g : j.at("groups")) d.snapshot.groups.push_back({g.at("name"), g.at("members")});
    for (const auto& o : j.at("ops")) {
      FlightRecord r;
      r.id = o.at("id"), r.group = o.at("group"), r.seq = o.at("seq"), r.op = o.at("op"), r.count = o.at("count");
      r.dtype = o.at("dtype"), r.peer = o.at("peer"), r.t_issue = o.at("t_issue"), r.t_end = o.at("t_end");
      r.state = state_of(o.at("state"), source);
      MT_DATA_CHECK(r.group >= 0 && r.group < static_cast<int>(d.snapshot.groups.size()),
                    "{}: operation {} names group {}, but the dump lists {} groups", source, r.id, r.group,
                    d.snapshot.groups.size());
      d.snapshot.records.push_back(std::move(r));
    }
    if (j.contains("peers"))
      for (const auto& p : j.at("peers")) d.peers.push_back({p.at("rank"), p.at("host"), p.at("reach")});
    if (j.contains("stale_s")) d.stale_s = j.at("stale_s");
    if (j.contains("unscheduled"))
      for (const auto& u : j.at("unscheduled")) d.unscheduled.push_back({u.at("from"), u.at("to")});
    return d;
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("{}: not a flight-recorder dump ({})", source, e.what()));
  }
}

bool write_file_atomic(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.good()) return false;
  }
  fs::rename(tmp, path, ec);
  return !ec;
}

}  // namespace megatrain
