// Slow links during training (docs/robustness.md R12, for the network): every
// health.link_check_interval steps the ranks probe the links of the rank ring with a 256 KiB
// message (health/link_probe.h), judged like the self-check's (a third of the fastest pair of the
// same kind) with health.straggler_min_ms as the floor against noise. A host blamed in
// health.straggler_windows probes in a row is reported once by rank 0 (again only after a probe
// clears it), in the log and in
// health.run_dir/reports/links.jsonl:
//   SLOW_LINK step=40 host=simhost2 ranks=[2,3] pairs=1-2,3-4 bandwidth=1.0MB/s reference=1450MB/s probes=2
// A probe costs every rank about 2–3 ring transfers of the message (under a millisecond on a
// healthy host link).
#pragma once
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "health/health_options.h"
#include "health/link_probe.h"
#include "parallel/comm.h"

namespace megatrain {

class LinkMonitor {
 public:
  // Off when health.link_check_interval is 0 or the world has one rank. `hosts`: every rank's host.
  LinkMonitor(const HealthOptions& opts, const Comm& world, std::vector<std::string> hosts);
  // After every step on every rank; collective at each probe.
  void step_done(int64_t step);

 private:
  void report(int64_t step, const std::string& host, const std::vector<LinkSample>& links, int probes);

  HealthOptions opts_;
  Comm world_;
  std::vector<std::string> hosts_;
  std::map<std::string, int> run_;  // host → probes in a row that blamed it
  std::ofstream jsonl_;
};

}  // namespace megatrain
