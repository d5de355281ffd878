// Reading a run's metrics file (trainer/metrics.h: one JSON object per line, each with its "step"):
// every line parsed, the values one key takes after a given step, and two runs compared. The one way e2e tests look at
// what a run logged.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace megatrain::test {

// Every line of the metrics file, in order; a test failure when the file cannot be opened.
inline std::vector<nlohmann::json> metrics_lines(const std::filesystem::path& file) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(file);
  EXPECT_TRUE(in.is_open()) << "no metrics file " << file;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// The values of `key`, in order, on the lines whose step is greater than `after_step` (0: all).
inline std::vector<double> metrics_field(const std::vector<nlohmann::json>& lines, const std::string& key,
                                         int64_t after_step = 0) {
  std::vector<double> v;
  for (const nlohmann::json& j : lines)
    if (j.contains(key) && j.at("step").get<int64_t>() > after_step) v.push_back(j.at(key).get<double>());
  return v;
}

inline std::vector<double> metrics_field(const std::filesystem::path& file, const std::string& key,
                                         int64_t after_step = 0) {
  return metrics_field(metrics_lines(file), key, after_step);
}

// Two runs' metrics line by line — loss, grad_norm and val_loss within `rel` relative, or bitwise at
// rel = 0 — as test failures naming `what`; prints the largest relative difference seen (the figure
// a bound is judged by); returns how many values were compared.
inline int compare_runs(const std::vector<nlohmann::json>& a, const std::vector<nlohmann::json>& b, double rel,
                        const std::string& what) {
  EXPECT_EQ(a.size(), b.size()) << what;
  int compared = 0;
  double largest = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i]["step"], b[i]["step"]) << what;
    for (const char* k : {"loss", "grad_norm", "val_loss"}) {
      if (!a[i].contains(k)) continue;
      const double x = a[i][k].get<double>(), y = b[i][k].get<double>();
      if (x != 0.0) largest = std::max(largest, std::fabs(x - y) / std::fabs(x));
      if (rel == 0.0)
        EXPECT_EQ(x, y) << what << ": " << k << " at step " << a[i]["step"];
      else
        EXPECT_NEAR(x, y, rel * std::fabs(x)) << what << ": " << k << " at step " << a[i]["step"];
      ++compared;
    }
  }
  std::printf("%s: %d values, largest relative difference %.2e\n", what.c_str(), compared, largest);
  return compared;
}

}  // namespace megatrain::test
