#include "health/trace_merge.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <vector>

#include "health/flight_dump.h"
#include "health/median.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;

// One rank's events: the array form may lack its closing bracket (a file still being written).
nlohmann::json read_events(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ',' || s.back() == ' ')) s.pop_back();
  if (s.empty() || s.back() != ']') s += "]";
  try {
    nlohmann::json j = nlohmann::json::parse(s);
    MT_DATA_CHECK(j.is_array(), "{}: not a Chrome-trace event array", file.string());
    return j;
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("{}: not a megatrain timeline ({})", file.string(), e.what()));
  }
}

}  // namespace

TraceMergeResult merge_traces(const std::string& run_dir) {
  const fs::path dir = fs::path(run_dir) / "timeline";
  MT_DATA_CHECK(fs::is_directory(dir), "{}: no such folder; run with health.timeline = true and health.run_dir = {}",
                dir.string(), run_dir);
  std::map<int, fs::path> files;
  const std::regex name("rank_(\\d+)\\.trace\\.json");
  for (const auto& e : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string n = e.path().filename().string();
    if (std::regex_match(n, m, name)) files[std::stoi(m[1])] = e.path();
  }
  MT_DATA_CHECK(!files.empty(), "{}: holds no rank_R.trace.json files", dir.string());
  TraceMergeResult out;
  nlohmann::json all = nlohmann::json::array();
  std::string heat = "rank\tsteps\tstep_ms\tcompute_ms\twait_ms\n";
  for (const auto& [rank, file] : files) {
    std::vector<double> step, compute, wait;
    for (auto& ev : read_events(file)) {
      if (ev.value("cat", "") == "step") {
        step.push_back(ev.value("dur", 0.0) / 1e3);
        compute.push_back(ev["args"].value("compute_ms", 0.0));
        wait.push_back(ev["args"].value("wait_ms", 0.0));
      }
      all.push_back(std::move(ev));
    }
    heat += fmt::format("{}\t{}\t{:.3f}\t{:.3f}\t{:.3f}\n", rank, step.size(), median(step), median(compute), median(wait));
    ++out.ranks;
  }
  out.events = static_cast<long long>(all.size());
  out.merged = (dir / "merged.trace.json").string();
  out.heatmap = (dir / "heatmap.tsv").string();
  nlohmann::json doc = {{"traceEvents", std::move(all)}, {"displayTimeUnit", "ms"}};
  MT_DATA_CHECK(write_file_atomic(out.merged, doc.dump() + "\n") && write_file_atomic(out.heatmap, heat),
                "{}: cannot be written", dir.string());
  return out;
}

}  // namespace megatrain
