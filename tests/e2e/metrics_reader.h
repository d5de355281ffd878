// Reading a run's metrics file (trainer/metrics.h: one JSON object per line, each with its "step"):
// every line parsed, and the values one key takes after a given step. The one way e2e tests look at
// what a run logged.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
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

}  // namespace megatrain::test
