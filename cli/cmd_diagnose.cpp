// `megatrain diagnose RUN_DIR`: reads the flight-recorder dumps the watchdogs wrote
// (RUN_DIR/fr/rank_R.json, or a folder of them) and prints where the job hung and which rank(s)
// did not arrive (health/flight_analysis.h). Exit code 0 when it names a cause, 1 when the dumps
// show none; a folder without dumps, or a damaged dump, is bad data (65).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "health/flight_analysis.h"
#include "kernels/check.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;

std::vector<FlightDump> read_dumps(const std::string& run_dir) {
  fs::path dir = run_dir;
  MT_DATA_CHECK(fs::is_directory(dir), "{}: no such folder; pass the run's health.run_dir", run_dir);
  if (fs::is_directory(dir / "fr")) dir /= "fr";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (e.is_regular_file() && n.starts_with("rank_") && n.ends_with(".json")) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  MT_DATA_CHECK(!files.empty(), "{}: holds no flight-recorder dumps (rank_R.json); the watchdog writes them to "
                "health.run_dir/fr when it fires", dir.string());
  std::vector<FlightDump> dumps;
  for (const fs::path& f : files) {
    std::ifstream in(f);
    std::stringstream text;
    text << in.rdbuf();
    dumps.push_back(parse_flight_dump(text.str(), f.string()));
  }
  return dumps;
}

}  // namespace

Command add_diagnose_command(CLI::App& root) {
  auto run_dir = std::make_shared<std::string>();
  CLI::App* app = root.add_subcommand("diagnose", "Name the rank(s) and the operation a hung job waited on, from its "
                                                  "flight-recorder dumps");
  app->add_option("RUN_DIR", *run_dir, "health.run_dir of the run (or its fr/ folder)")->required();
  return Command{app, [run_dir] {
                   const std::vector<FlightDump> dumps = read_dumps(*run_dir);
                   const FlightDiagnosis d = diagnose_flights(dumps);
                   fmt::print("{}", format_diagnosis(dumps, d));
                   return d.named_cause() ? 0 : 1;
                 }};
}

}  // namespace megatrain
