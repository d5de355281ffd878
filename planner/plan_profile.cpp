#include "planner/plan_profile.h"

#include <fmt/format.h>
#include <omp.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <vector>

#include "kernels/check.h"
#include "model/flops.h"
#include "trainer/peak_flops.h"
#include "trainer/rank_run.h"

namespace megatrain {
namespace {

// The slowest rank's seconds by `clock` for f(), everyone starting together: best of `reps`.
template <class F>
double timed_together(const Comm& world, int reps, PeakClock clock, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    world.barrier();
    const double t0 = peak_clock_seconds(clock);
    f();
    double t = peak_clock_seconds(clock) - t0;
    world.all_reduce(&t, 1, ReduceOp::max).wait();
    best = std::min(best, t);
  }
  return best;
}

// CPU seconds ([Note: CPU-time clock]) of one micro-batch's forward and backward
// (RankRun::train_step) of `c` on a replica of its own on every rank at once: tp = pp = dp = 1, the
// run's micro-batch, a step of two micro-batches.
double step_seconds(const Config& c, const Comm& world) {
  Config one = c;
  one.parallel.tp = one.parallel.pp = one.parallel.ep = 1;
  one.parallel.dp = 0;
  one.parallel.zero_stage = 0;
  one.parallel.virtual_stages = 1;
  one.parallel.pipeline_layers.clear();
  one.parallel.pipeline_schedule = "1f1b";
  one.train.global_batch_size = 2 * one.train.micro_batch_size;
  resolve_config(one, 1);
  const Comm self = world.split(world.rank(), 0, "plan-measure");
  RankRun run(one, self);
  run.train_step(0);  // warm-up
  int64_t batch = 1;
  return timed_together(world, 3, PeakClock::cpu, [&] { run.train_step(batch++); }) / 2.0;
}

}  // namespace

DeviceProfile gpu_profile(const std::string& name) {
  DeviceProfile p;
  p.name = name;
  p.efficiency = 0.45;  // a typical MFU of a tuned dense transformer step
  p.latency_us = 10.0;
  p.devices_per_node = 8;
  p.overlap = 0.9;
  if (name == "h100") {
    p.peak_tflops = 989, p.memory_gib = 80, p.memory_gbps = 3350, p.intra_gbps = 450, p.inter_gbps = 50;
  } else if (name == "a100") {
    p.peak_tflops = 312, p.memory_gib = 80, p.memory_gbps = 2039, p.intra_gbps = 300, p.inter_gbps = 25;
  } else {
    MT_INPUT_CHECK(false, "--gpu {}: expected h100, a100 or cpu (cpu reads --profile, written by plan --measure)",
                   name);
  }
  return p;
}

void apply_network(DeviceProfile& p, const std::string& spec) {
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t eq = item.find('=');
    MT_INPUT_CHECK(eq != std::string::npos, "--network '{}': expected KEY=GB/s items such as nvlink=450,ib=50", spec);
    const std::string key = item.substr(0, eq);
    double v = 0;
    try {
      v = std::stod(item.substr(eq + 1));
    } catch (const std::exception&) {
      v = -1;
    }
    MT_INPUT_CHECK(v > 0, "--network '{}': '{}' needs a positive number of GB/s", spec, item);
    if (key == "nvlink" || key == "intra") {
      p.intra_gbps = v;
    } else if (key == "ib" || key == "inter") {
      p.inter_gbps = v;
    } else {
      MT_INPUT_CHECK(false, "--network '{}': unknown link '{}' (nvlink|intra, ib|inter)", spec, key);
    }
  }
}

DeviceProfile measure_cpu_profile(const Config& c, const Comm& world) {
  DeviceProfile p;
  p.name = "cpu";
  p.devices_per_node = world.size();
  p.overlap = 0.0;  // ranks share the cores that would compute: copying messages is not hidden
  p.cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  p.threads = omp_get_max_threads();
  p.peak_tflops = measure_peak_tflops(world, c.train.precision, PeakClock::cpu).tflops_per_rank;
  const double flops = model_flops_per_token(c.model, c.train.seq_len) * c.train.micro_batch_size * c.train.seq_len;
  p.efficiency = flops / (step_seconds(c, world) * p.peak_tflops * 1e12);
  std::vector<char> a(size_t{64} << 20, 1), b(a.size());
  p.memory_gbps = 2.0 * static_cast<double>(a.size()) / timed_together(world, 3, PeakClock::wall, [&] {
                    std::memcpy(b.data(), a.data(), a.size());
                  }) / 1e9;
  p.memory_gib = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE)) /
                 (1 << 30) / world.size();
  const int n = world.size();
  if (n > 1) {
    std::vector<float> big(size_t{2} << 20), one(2);
    const double t = timed_together(world, 3, PeakClock::wall, [&] { world.all_reduce(big.data(), static_cast<int64_t>(big.size())).wait(); });
    const double lat = timed_together(world, 5, PeakClock::wall, [&] { world.all_reduce(one.data(), 2).wait(); });
    p.latency_us = lat / (2.0 * (n - 1)) * 1e6;
    p.intra_gbps = 2.0 * (n - 1) / n * static_cast<double>(big.size() * sizeof(float)) / (t - lat) / 1e9;
  } else {
    p.latency_us = 0.0, p.intra_gbps = p.memory_gbps;
  }
  p.inter_gbps = p.intra_gbps;
  return p;
}

std::string profile_to_toml(const DeviceProfile& p) {
  return fmt::format(
      "# megatrain plan --measure: this machine as the planner sees it\n"
      "name = \"{}\"\npeak_tflops = {:.6g}\nefficiency = {:.6g}\nmemory_gib = {:.6g}\nmemory_gbps = {:.6g}\n"
      "intra_gbps = {:.6g}\ninter_gbps = {:.6g}\nlatency_us = {:.6g}\ndevices_per_node = {}\noverlap = {:.6g}\n"
      "cores = {}\nthreads = {}\n",
      p.name, p.peak_tflops, p.efficiency, p.memory_gib, p.memory_gbps, p.intra_gbps, p.inter_gbps, p.latency_us,
      p.devices_per_node, p.overlap, p.cores, p.threads);
}

DeviceProfile load_profile(const std::string& path) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    MT_INPUT_CHECK(false, "--profile {}: {} (write one with megatrain plan --measure --profile-out {})", path,
                   e.description(), path);
  }
  const auto number = [&](const char* key) {
    const std::optional<double> v = t[key].value<double>();
    MT_INPUT_CHECK(v.has_value(), "--profile {}: no number '{}' (rewrite it with megatrain plan --measure)", path, key);
    return *v;
  };
  DeviceProfile p;
  p.name = t["name"].value_or(std::string("cpu"));
  p.peak_tflops = number("peak_tflops"), p.efficiency = number("efficiency"), p.memory_gib = number("memory_gib");
  p.memory_gbps = number("memory_gbps"), p.intra_gbps = number("intra_gbps"), p.inter_gbps = number("inter_gbps");
  p.latency_us = number("latency_us"), p.overlap = number("overlap");
  p.devices_per_node = static_cast<int>(number("devices_per_node"));
  p.cores = static_cast<int>(number("cores")), p.threads = static_cast<int>(number("threads"));
  MT_INPUT_CHECK(p.cores >= 0 && p.threads >= 1,
                 "--profile {}: cores = {} and threads = {} need cores ≥ 0 and threads ≥ 1 (rewrite it with megatrain "
                 "plan --measure)",
                 path, p.cores, p.threads);
  return p;
}

}  // namespace megatrain
