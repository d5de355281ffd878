// Runs the megatrain binary (path from $MEGATRAIN_BIN) in a shell with a time limit and captures
// exit code and combined output, for end-to-end tests.
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace megatrain::test {

struct Result {
  int code = -1;
  std::string output;
};

inline std::string megatrain_bin() {
  const char* b = std::getenv("MEGATRAIN_BIN");
  return b ? b : MEGATRAIN_BIN_PATH;
}

inline Result run_shell(const std::string& cmd, int timeout_s = 300) {
  Result r;
  const std::string full = "timeout " + std::to_string(timeout_s) + " " + cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

inline Result run_megatrain(const std::string& args, int timeout_s = 300) {
  return run_shell(megatrain_bin() + " " + args, timeout_s);
}

inline void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

}  // namespace megatrain::test
