// What the CPU benchmarks share to report a timing: the middle of repeated timings, the process's
// CPU seconds, and the CPU line printed beside every figure.
#pragma once
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace megatrain::bench {

// The upper middle of `v` (the middle one for the odd counts the benchmarks take).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The process's CPU seconds (all threads): on a machine shared with other work, the work done
// rather than the time waited for cores (with OMP_NUM_THREADS=1 no thread spins at a barrier).
inline double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// "CPU: MODEL; flags: …": the model name and the SIMD flags that decide the kernels' paths, from
// /proc/cpuinfo.
inline std::string cpu_line() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(in, line)) {
    if (model.empty() && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
    if (flags.empty() && line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 2));
      const std::set<std::string> keep = {"avx2", "f16c", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"};
      for (std::string w; words >> w;)
        if (keep.contains(w)) flags += w + " ";
    }
  }
  if (!flags.empty()) flags.pop_back();
  return fmt::format("CPU: {}; flags: {}", model, flags);
}

}  // namespace megatrain::bench
